"""How verdicts read: the status texts an operator sees after the word. Pure string building.

Kept apart from the judging so that a change of wording cannot change a decision, and the golden
tests (tests/e2e/test_golden.py) pin every line.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from .compare import Gauges
from .values import Reading, Streak
from .vocab import STALLING, STUCK, Settings


def seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def counts(g: Gauges) -> str:
    return f"{g.running:.0f} running, {g.waiting:.0f} waiting"


def readings(count: float) -> str:
    return f"{count:.0f} reading{'s' if count != 1 else ''}"


def first_reading(g: Gauges) -> str:
    return f"{counts(g)} (first reading: progress not yet measured)"


def repeated(g: Gauges, gap: float) -> str:
    return f"{counts(g)} (verdict of {seconds(gap)} ago repeated: too soon to compare)"


def restarted(reading: Reading, why: str, g: Gauges, now: float) -> str:
    when = ""
    if reading.process_start is not None and now >= reading.process_start:
        stamp = time.strftime("%H:%M:%S", time.localtime(reading.process_start))
        when = f" {seconds(now - reading.process_start)} ago (at {stamp})"
    return f"new process{when}: {why}, new baseline; {counts(g)}"


def engines(words: Mapping[str, str], stalls: Mapping[str, Streak], reading: Reading, now: float,
            settings: Settings) -> str:
    """Name the engines that are not well, with how long and over how many readings."""
    parts = []
    several = len(reading.engines) > 1
    for name, word in sorted(words.items()):
        if word not in (STUCK, STALLING):
            continue
        s, e = stalls[name], reading.engines[name]
        need = "" if word == STUCK else (
            f" (stuck at {settings.stuck_readings} readings and {seconds(settings.stuck_seconds)})")
        where = f"engine {name} with {e.running:.0f} running, {e.waiting:.0f} waiting: " if several else ""
        parts.append(f"{where}no progress for {seconds(now - s.since)} over {readings(s.readings)}{need}")
    if several and parts:
        parts.extend(f"engine {n} {w}" for n, w in sorted(words.items()) if w not in (STUCK, STALLING))
        return "; ".join(parts) + "; total "
    return "; ".join(parts) + ("; " if parts else "")


def models(model: str | None) -> str:
    return f"/v1/models lists {model}" if model else "/v1/models answers"


def unresponsive(detail: str, streak: Streak, now: float) -> str:
    return f"{detail} (for {seconds(now - streak.since)}, {readings(streak.readings)} in a row)"


def starting(since_restart: float, detail: str) -> str:
    return f"restarted {seconds(since_restart)} ago, not serving yet ({detail})"


# --------------------------------------------------------------------------- the idle probe

NOT_PROBED = "no work, not probed"
ASLEEP = "engine asleep, not probed"


def probe_answered(head: str, secs: float) -> str:
    return f"{head}probe answered in {secs:.2f} s"


def probe_rejected(detail: str) -> str:
    return f"no work, but the probe was rejected: {detail}"


def probe_cut_short(detail: str) -> str:
    return (f"no work, the probe got no answer ({detail}) in the time -t left it, "
            f"less than --probe-timeout: not proof of a stall")


def probe_no_reread(detail: str) -> str:
    return f"no work, the probe failed ({detail}) and there was no second reading"


def probe_unanswered_progress(g: Gauges, detail: str) -> str:
    return f"{counts(g)}; the probe got no answer ({detail}) but the engine progressed"


def probe_unanswered_stuck(g: Gauges, detail: str) -> str:
    return f"no progress while a 1-token probe went unanswered ({detail}); {counts(g)}"
