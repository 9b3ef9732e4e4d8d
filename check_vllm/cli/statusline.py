"""The last line of defence at output: whatever the server sent, the status line stays one short, clean line.

Schedulers keep the first line of a plugin's output (Nagios cuts it at 4 KB; a web UI shows it raw):
text from the server (a model id, a label value, an error body, an exception text) must not forge a
second line, colour a terminal, split the perfdata off at a `|`, or push the perfdata out of the line.
The wording layers cap what they quote; the character rule is contract.safe_text's; this bounds the
whole line, in the bytes stdout will write.
"""

from __future__ import annotations

import sys
from typing import TextIO

from check_vllm.contract.safe_text import one_line

#: The whole first line (status + perfdata) stays below this many bytes.
LINE_BYTES = 1024
#: The most room the text before the perfdata may take, however short the perfdata.
TEXT_BYTES = 700
#: What a cut text ends with, so an operator sees it was cut.
CUT = "..."


def prepare(stream: TextIO | None = None) -> None:
    """Make `stream` (stdout) write any text: a character its encoding lacks is escaped, never an error
    (LC_ALL=C, PYTHONIOENCODING=ascii)."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        pass


def _encoding(stream: TextIO | None = None) -> str:
    stream = sys.stdout if stream is None else stream
    return getattr(stream, "encoding", None) or "utf-8"


def size(text: str, encoding: str | None = None) -> int:
    """Bytes `text` takes on stdout (escapes included where the encoding lacks a character)."""
    try:
        return len(text.encode(encoding or _encoding(), errors="backslashreplace"))
    except LookupError:
        return len(text.encode("utf-8", errors="backslashreplace"))


def fit(text: str, budget: int = TEXT_BYTES, encoding: str | None = None, pipe: bool = True) -> str:
    """`text` cleaned, and cut to `budget` bytes of stdout with a visible "..." when longer."""
    text = one_line(text, pipe)  # the one character rule; this module adds the bound in bytes
    encoding = encoding or _encoding()
    if size(text, encoding) <= budget:
        return text
    room = max(budget - len(CUT), 0)
    out, used = [], 0
    for ch in text:
        cost = size(ch, encoding)
        if used + cost > room:
            break
        out.append(ch)
        used += cost
    return "".join(out).rstrip() + CUT


def text_budget(prefix: str, perfdata: str, encoding: str | None = None) -> int:
    """Room for the status text between `prefix` ("VLLM CRITICAL - ") and the perfdata ("| ..."),
    so that the whole line stays below LINE_BYTES; never less than a readable minimum."""
    encoding = encoding or _encoding()
    rest = size(prefix, encoding) + (size(" " + perfdata, encoding) if perfdata else 0)
    return max(min(TEXT_BYTES, LINE_BYTES - 1 - rest), 120)
