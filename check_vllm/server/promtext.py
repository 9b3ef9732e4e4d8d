"""Sample lines of the Prometheus text format (0.0.4), parsed: `name{label="value",...} value [timestamp]`,
an OpenMetrics exemplar (` # {...} value`) after it ignored.

The check reads some thirty pre-filtered lines per run. Importing prometheus_client's parser for them
loads the whole client library (registry, exposition, urllib, http.client), which cost a one-shot run more
than parsing does; this is the part of that parser the check uses, with its escapes (\\\\, \\", \\n).
Anything else on a line is an error (ValueError), as it is there.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PAIR = r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*'
_LINE = re.compile(rf"({_NAME})[ \t]*(?:\{{((?:{_PAIR},)*(?:{_PAIR})?)\}})?[ \t]+(\S+)(?:[ \t]+([^\s#]\S*))?(?:[ \t]+#[ \t].*)?[ \t]*")
_LABEL = re.compile(_PAIR + ",?")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESCAPE = re.compile(r"\\.")


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(0), m.group(0)), value) if "\\" in value else value


def sample(line: str) -> Sample:
    """One sample line; ValueError for anything that is not one."""
    m = _LINE.fullmatch(line)
    if m is None:
        raise ValueError(f"not a sample line: {line[:80]!r}")
    name, pairs, value = m.group(1), m.group(2), m.group(7)
    labels = {k: _unescape(v) for k, v in _LABEL.findall(pairs)} if pairs else {}
    return Sample(name, labels, float(value))
