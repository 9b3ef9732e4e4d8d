"""What counts as a number wherever check_vllm reads one that someone else wrote.

/metrics, the state file, the restart marker and the restart history all hand over numbers; one rule
decides which are usable, so a value the reader accepts is one the memory keeps, and reads back.
"""

from __future__ import annotations

#: Beyond 2**53 a float no longer counts in ones: no count, gauge or time of ours gets there honestly.
LARGEST = float(1 << 53)


def finite(value: object) -> float | None:
    """`value` as a float when it is a usable number: an int or a float (never a bool, never text), not
    NaN or infinite, and within LARGEST either way; else None. Never raises (an int too big for a float
    compares exactly)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= LARGEST:
        return None
    return float(value)
