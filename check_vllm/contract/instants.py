"""Time, in one home: a moment on the wall clock and the boot-time clock, and the lapse between two.

The judge's entries take an Instant (`instant()` makes one of a bare wall time, for a test table or an older
caller); everything below them measures with elapsed() or seconds_between(). Pure.
"""

from __future__ import annotations

from typing import NamedTuple


class Instant(NamedTuple):
    """A moment on two clocks: the wall clock (for people and the handler) and the boot-time clock of one
    boot, which no clock step moves: elapsed time is measured on it whenever both ends have it."""

    wall: float
    mono: float | None = None
    boot: str | None = None


def elapsed(since: Instant, now: Instant) -> float | None:
    """Seconds from `since` to `now`, or None when no clock spans both (another boot)."""
    if since.mono is not None and now.mono is not None and since.boot and now.boot:
        return now.mono - since.mono if since.boot == now.boot else None
    return now.wall - since.wall


def instant(now: Instant | float) -> Instant:
    """A bare wall-clock time (a test table, an old caller) is an Instant without the boot-time clock."""
    return now if isinstance(now, Instant) else Instant(float(now))


def seconds_between(since: Instant, now: Instant) -> float:
    """As elapsed, but across a reboot on the wall clock, the only one that spans both: for the age of a
    restart (its marker, the cooldown), which a reboot does not end, unlike a stall's proof."""
    lapse = elapsed(since, now)
    return now.wall - since.wall if lapse is None else lapse
