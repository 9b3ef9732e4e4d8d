"""Text a server wrote, made fit for a status line: no control characters, no `|`, bounded length.

Model ids, label values, error bodies and exception texts come from the server (or whatever answers
in its place); one of them must never forge a second line, colour a terminal or push the perfdata
out of the 4 KB a scheduler keeps.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f|]")


def clean(text: str, cap: int = 120) -> str:
    text = _UNSAFE.sub(lambda m: "/" if m.group() == "|" else " ", str(text))
    text = " ".join(text.split())
    return text if len(text) <= cap else text[: max(cap - 3, 0)] + "..."


def without_userinfo(url: str) -> str:
    """`url` with any user:password@ taken out (a status line is readable by every monitoring user)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host_end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, host_end)
    return f"{scheme}://***@{rest[at + 1:]}" if at >= 0 else url
