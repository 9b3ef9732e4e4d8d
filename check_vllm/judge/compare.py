"""Two readings side by side: same process or not, did anything move, how fast. Pure arithmetic.

The rule the judge builds on: movement of ANY progress signal beyond what the check's own probe
could explain is progress; counters of two processes are never compared.
"""

from __future__ import annotations

from typing import NamedTuple

from check_vllm.contract.kept import Footprint
from check_vllm.contract.values import CHANGING_FIELDS, COUNTER_FIELDS, PROGRESS_FIELDS, EngineReading, Reading

#: Seconds two process_start_time_seconds may differ and still name one process (the float's rounding).
START_TOLERANCE = 0.01
#: Bound on what one unanswered probe (a short prompt, max_tokens 1) can move.
FAILED_PROBE = Footprint(prompt_tokens=64.0, completion_tokens=1.0, at=0.0)


class Gauges(NamedTuple):
    running: float
    waiting: float
    kv_cache: float | None  # percent, the fullest engine


def gauges(reading: Reading) -> Gauges:
    kv = [e.kv_cache for e in reading.engines.values() if e.kv_cache is not None]
    return Gauges(
        running=sum(e.running for e in reading.engines.values()),
        waiting=sum(e.waiting for e in reading.engines.values()),
        kv_cache=max(kv) * 100.0 if kv else None,
    )


def restart_reason(prev: Reading, cur: Reading) -> str | None:
    """Why `cur` cannot come from the process that produced `prev`, or None if it can."""
    if prev.process_start is not None and cur.process_start is not None:
        if abs(prev.process_start - cur.process_start) > START_TOLERANCE:
            return "process start time changed"
    for name, c in cur.engines.items():
        p = prev.engines.get(name)
        if p is None:
            continue
        if p.created is not None and c.created is not None and abs(p.created - c.created) > 1e-3:
            return "counters were re-created"
        if not c.coarse and _counters(p) and not _counters(c):
            return "its counters are gone (a new process's page shows a counter only once it is used)"
        for f in COUNTER_FIELDS:
            a, b = getattr(p, f), getattr(c, f)
            if a is not None and b is not None and b < a - 1e-9:
                return "counters went backwards"
    return None


def _counters(e: EngineReading) -> bool:
    return any(getattr(e, f) is not None for f in COUNTER_FIELDS)


def continues(prev: Reading, cur: Reading) -> bool:
    """Positive evidence that `cur` comes from the process that produced `prev`: the same identity
    (start time, or the counters' `_created`) and no counter behind; counters alone only where
    neither page carries an identity (multiprocess mode)."""
    if restart_reason(prev, cur) is not None:
        return False
    if prev.process_start is not None and cur.process_start is not None:
        return True
    created = [(prev.engines[n].created, e.created) for n, e in cur.engines.items() if n in prev.engines]
    if any(a is not None and b is not None for a, b in created):
        return True
    identities = [prev.process_start, cur.process_start,
                  *(e.created for e in prev.engines.values()), *(e.created for e in cur.engines.values())]
    return all(x is None for x in identities)


def identified(prev: Reading, cur: Reading) -> bool:
    """Both pages name their process (start time, or a counter's `_created` in an engine both have): only
    then can one say that `cur` comes from the process of `prev`, rather than from a new one whose counters
    have passed a fresh page's (multiprocess mode has neither)."""
    if prev.process_start is not None and cur.process_start is not None:
        return True
    return any(prev.engines[n].created is not None and e.created is not None
               for n, e in cur.engines.items() if n in prev.engines)


def allowance(probe: Footprint | None) -> dict[str, float]:
    """What one probe of p prompt and c generated tokens can move: at most c+1 steps, one finished request."""
    if probe is None:
        return {}
    p, c = probe.prompt_tokens, probe.completion_tokens
    return {"prompt_tokens": p, "generation_tokens": c, "steps": c + 1, "step_tokens": p + c + 1, "finished": 1.0}


def progressed(p: EngineReading, c: EngineReading, allowed: dict[str, float]) -> bool:
    """Did any progress signal move by more than the check's own probe could explain?"""
    for f in PROGRESS_FIELDS:
        a, b = getattr(p, f), getattr(c, f)
        if a is None or b is None:
            continue
        if f in CHANGING_FIELDS:
            if abs(b - a) > 1e-9 and (c.work > 0 or p.work > 0):
                return True
        elif b - a > allowed.get(f, 0.0) + 1e-9:
            return True
    return False


def comparable(p: EngineReading, c: EngineReading) -> bool:
    """Is there any progress signal present in both readings? Without one, no-progress proves nothing."""
    return any(getattr(p, f) is not None and getattr(c, f) is not None for f in PROGRESS_FIELDS)


def counted(p: EngineReading, c: EngineReading) -> bool:
    """Is a counter present in both readings? An idle engine's work shows only in its counters."""
    return any(getattr(p, f) is not None and getattr(c, f) is not None for f in PROGRESS_FIELDS
               if f not in CHANGING_FIELDS)


def moved_engines(prev: Reading, cur: Reading, allowed: dict[str, float]) -> list[str]:
    return [n for n, e in cur.engines.items() if n in prev.engines and progressed(prev.engines[n], e, allowed)]


def rate(prev: Reading, cur: Reading, f: str, gap: float, own: float = 0.0) -> float | None:
    """Per-second growth of counter `f` over all engines, less what our own probe (`own`) added."""
    deltas = [
        getattr(c, f) - getattr(prev.engines[n], f)
        for n, c in cur.engines.items()
        if n in prev.engines and getattr(c, f) is not None and getattr(prev.engines[n], f) is not None
    ]
    if not deltas or gap <= 0:
        return None
    return max(sum(deltas) - own, 0.0) / gap


class Rates(NamedTuple):
    """The perfdata rates, named as the Verdict fields they fill."""

    tokens_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    steps_per_second: float | None = None


def rates(prev: Reading, cur: Reading, gap: float, allowed: dict[str, float]) -> Rates:
    return Rates(
        rate(prev, cur, "generation_tokens", gap, allowed.get("generation_tokens", 0.0)),
        rate(prev, cur, "prompt_tokens", gap, allowed.get("prompt_tokens", 0.0)),
        rate(prev, cur, "steps", gap, allowed.get("steps", 0.0)),
    )


def families(e: EngineReading) -> frozenset[str]:
    """The progress families a page carries for this engine."""
    return frozenset(f for f in PROGRESS_FIELDS if getattr(e, f) is not None)


def lost_signals(p: EngineReading, c: EngineReading) -> bool:
    """A page without a progress family the previous one had cannot show that family standing still."""
    return not families(p) <= families(c)


def signals_differ(p: EngineReading, c: EngineReading) -> bool:
    """Two pages that do not carry the same progress families: a family on one side only could have moved
    unseen, so standing still on the others proves nothing."""
    return families(p) != families(c)
