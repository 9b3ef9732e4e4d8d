"""Text a server wrote, made fit for a status line, a log line or a chart label: one rule for all of them.

Model ids, label values, error bodies and exception texts come from the server (or whatever answers
in its place); one of them must never forge a second line, colour a terminal, turn the text around it
(a bidi override), or push the perfdata out of the 4 KB a scheduler keeps.
"""

from __future__ import annotations

import re

#: C0 and C1 controls, DEL, the Unicode line and paragraph separators, and the bidi embeddings, overrides
#: and isolates a UI may honour.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: str, pipe: bool = True) -> str:
    """One line: every unsafe character a space, white space folded, and `|` (the perfdata separator) a
    `/`, unless `pipe` is False (a log line has no perfdata)."""
    text = UNSAFE.sub(" ", str(text))
    return " ".join((text.replace("|", "/") if pipe else text).split())


def clean(text: str, cap: int = 120) -> str:
    """one_line(text), cut to `cap` characters with a visible "..." (a quote, never the whole message)."""
    text = one_line(text)
    return text if len(text) <= cap else text[: max(cap - 3, 0)] + "..."


def without_userinfo(url: str) -> str:
    """`url` with any user:password@ taken out (a status line is readable by every monitoring user)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host_end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, host_end)
    return f"{scheme}://***@{rest[at + 1:]}" if at >= 0 else url
