"""The one proof rule behind every CRITICAL that a restart would act on, and the time it is measured in.

A condition (no progress with work present, no answer, an idle probe unanswered with nothing moving)
proves a server stuck only when it has held over `stuck_readings` readings spanning `stuck_seconds`
of real elapsed time. Elapsed time comes from the boot-time clock when both ends carry one of the
same boot, so a wall-clock step can neither make nor hide a stall. Pure.
"""

from __future__ import annotations

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant, elapsed
from check_vllm.contract.kept import Streak


def extend(streak: Streak | None, start: Instant, now: Instant) -> Streak:
    """One more reading of the condition: the streak grows, or starts at `start` when it cannot continue."""
    if streak is not None:
        lasted = elapsed(streak.since, now)
        if lasted is not None and lasted >= 0:
            return Streak(streak.since, streak.readings + 1)
    return Streak(start, 1.0)


def lasted(streak: Streak, now: Instant) -> float:
    return max(elapsed(streak.since, now) or 0.0, 0.0)


def proven(streak: Streak | None, now: Instant, settings: Settings) -> bool:
    return streak is not None and streak.readings >= settings.stuck_readings \
        and lasted(streak, now) >= settings.stuck_seconds
