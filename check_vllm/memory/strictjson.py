"""The JSON the state files hold, read strictly: what json.loads accepts but our writer (allow_nan=False)
would refuse must not get past here, whatever another version, a crash or a neighbour left in a file."""

from __future__ import annotations

import json
from typing import Any

from check_vllm.contract.numbers import finite

#: Nesting deeper than this is not a file we wrote (ours go 5 levels deep); deeper would only risk recursion.
MAX_DEPTH = 32


def _not_json_number(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _bounded_int(text: str) -> int:
    if len(text) > 30:  # ours are within numbers.LARGEST; a longer one would overflow float()
        raise ValueError("integer too long")
    return int(text)


def _finite_float(text: str) -> float:
    value = finite(float(text))  # 1e999 parses as inf
    if value is None:
        raise ValueError(f"{text[:20]} is not a number we could have written")
    return value


def _shallow(doc: Any, limit: int = MAX_DEPTH) -> bool:
    """Nested no deeper than `limit` (walked without recursion)."""
    todo: list[tuple[Any, int]] = [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return False
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return True


def parse_json(raw: bytes) -> Any:
    """A document we could have written, or None: strict JSON (no NaN/Infinity, no number that only
    parses to infinity), UTF-8, nested no deeper than MAX_DEPTH. Whatever the bytes, this never raises:
    what json.loads accepts but the writer (allow_nan=False) would refuse must not get past here."""
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_not_json_number,
                         parse_float=_finite_float, parse_int=_bounded_int)
    except (UnicodeDecodeError, ValueError, RecursionError, MemoryError):
        return None
    return doc if _shallow(doc) else None
