"""The decision: (memory, new evidence, settings, now) -> Verdict, which carries the next memory.

Pure: no I/O, no clock, no httpx, no nagiosplugin. The check keeps the memory in a file between
runs and the Netdata collector keeps it in memory; both call these functions, so they never disagree.

Work present plus movement of ANY progress signal is busy and healthy; stuck needs work present and
no movement over `stuck_readings` comparisons spanning `stuck_seconds`. Counters of two processes
are never compared. The three entry points: `assess` (a /metrics reading), `after_probe` (the idle
probe's outcome, and a re-read when it asks for one), `assess_failure` (no reading).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from . import wording
from .compare import (
    FAILED_PROBE,
    Gauges,
    Rates,
    allowance,
    comparable,
    gauges,
    moved_engines,
    progressed,
    rates,
    restart_reason,
)
from .values import (
    ANSWERED,
    CUT_SHORT,
    REFUSED,
    REJECTED,
    Baseline,
    EngineReading,
    Failure,
    Footprint,
    Memory,
    ProbeOutcome,
    Reading,
    Remembered,
    Streak,
    Verdict,
)
from .vocab import (
    BUSY,
    CRITICAL,
    DOWN,
    ENGINE_RANK,
    IDLE,
    NO_METRICS,
    OK,
    PROBE,
    PROXY,
    REREAD,
    RESTARTED,
    SLEEPING,
    STALLING,
    STARTING,
    STUCK,
    UNRESPONSIVE,
    WARNING,
    WORKING,
    Settings,
)

_NO_STALLS: Mapping[str, Streak] = MappingProxyType({})
_CODE = {STUCK: CRITICAL, STALLING: WARNING}
NO_RATES = Rates()


def _finish(memory: Memory, word: str, code: int, text: str, g: Gauges | None, at: float, *,
            action: str | None = None, engines: Mapping[str, str] | None = None, stalled: float | None = None,
            probe: float | None = None, rate_values: Rates = NO_RATES) -> Verdict:
    """The verdict, with itself remembered in the memory it hands on."""
    engines = MappingProxyType(dict(engines or {}))
    return Verdict(
        word=word, code=code, text=text, action=action, engines=engines,
        memory=memory._replace(last=Remembered(word, code, text, at, engines)),
        running=g.running if g else None, waiting=g.waiting if g else None, kv_cache=g.kv_cache if g else None,
        stalled_seconds=stalled if stalled is not None else (0.0 if g else None),
        probe_seconds=probe, **rate_values._asdict(),
    )


def _keep(memory: Memory, reading: Reading, now: float, stalls: Mapping[str, Streak] = _NO_STALLS) -> Memory:
    """The reading becomes the baseline; the probe footprint it may have explained is spent."""
    return memory._replace(baseline=Baseline(reading, now), stalls=MappingProxyType(dict(stalls)), probe=None)


def _idle(memory: Memory, reading: Reading, g: Gauges, now: float, words: Mapping[str, str] | None = None,
          rate_values: Rates = NO_RATES) -> Verdict:
    return _finish(memory, IDLE, OK, wording.NOT_PROBED, g, now, action=PROBE,
                   engines=words or {n: IDLE for n in reading.engines}, rate_values=rate_values)


def _restarted(memory: Memory, reading: Reading, why: str, now: float) -> Verdict:
    g = gauges(reading)
    asleep = all(e.asleep for e in reading.engines.values())
    return _finish(_keep(memory, reading, now), RESTARTED, OK, wording.restarted(reading, why, g, now), g, now,
                   action=PROBE if reading.work <= 0 and not asleep else None,
                   engines={n: RESTARTED for n in reading.engines})


def _top(words: Mapping[str, str]) -> str:
    word = next(w for w in ENGINE_RANK if w in words.values())
    return IDLE if word == SLEEPING and IDLE in words.values() else word


# --------------------------------------------------------------------------- readings


def _short_gap_word(prior: str | None, cur: EngineReading) -> str:
    """An engine compared over less than min_gap: its stall neither grows nor ends, its last word stands."""
    if cur.work > 0:
        return prior if prior in (STALLING, STUCK) else BUSY
    return IDLE if prior in WORKING or prior is None else prior


def _engine(name: str, prev: Reading, cur: EngineReading, memory: Memory, gap: float, at: float, now: float,
            allowed: dict[str, float], settings: Settings) -> tuple[str, Streak | None]:
    """The per-engine rule: this engine's word, and its no-progress streak if it has one."""
    p = prev.engines.get(name)
    if cur.asleep:
        return SLEEPING, None
    if p is not None and progressed(p, cur, allowed):
        return (BUSY if cur.work > 0 else IDLE), None
    if cur.work <= 0:
        return IDLE, None
    if p is None or not comparable(p, cur):
        return BUSY, None  # an engine we have not seen, or no signal on both pages: nothing to compare
    old = memory.stalls.get(name)
    if gap < settings.min_gap:  # another engine's progress let this comparison happen
        prior = memory.last.engines.get(name) if memory.last else None
        word = _short_gap_word(prior if old else None, cur)
        return word, (Streak(min(old.since, now), old.readings) if old and word != BUSY else None)
    since, count = (old.since, old.readings) if old and old.since <= now else (at, 0.0)
    streak = Streak(since, count + 1)
    stuck = streak.readings >= settings.stuck_readings and now - since >= settings.stuck_seconds
    return (STUCK if stuck else STALLING), streak


def _repeat(memory: Memory, reading: Reading, gap: float, now: float) -> Verdict | None:
    """Runs closer together than min_gap with nothing moved: keep the older baseline, repeat the last verdict.

    None when there is no work and nothing fit to repeat (work gone since a busy/stalling/stuck verdict,
    or a verdict that was no judgement of progress): with no work a short gap cannot wrongly call
    anything stalled, so the caller judges afresh (and probes).
    """
    last = memory.last or Remembered("", None, "", None)
    word, code = last.word, last.code
    if word in WORKING and reading.work <= 0:
        return None
    engines = {n: _short_gap_word(last.engines.get(n), e) for n, e in reading.engines.items()}
    if word in WORKING or (word == IDLE and reading.work > 0):
        word = _top(engines)
        code = _CODE.get(word, OK)
    if word not in (*WORKING, IDLE, RESTARTED) or code not in (OK, WARNING, CRITICAL):
        if reading.work <= 0:
            return None  # nothing worth repeating (down, a failed probe...): judge afresh
        word, code = BUSY, OK
    g = gauges(reading)
    stalled = max((now - s.since for n, s in memory.stalls.items() if engines.get(n) in (STUCK, STALLING)),
                  default=0.0)
    return Verdict(word=word, code=code, text=wording.repeated(g, gap), memory=memory,
                   engines=MappingProxyType(engines), running=g.running, waiting=g.waiting, kv_cache=g.kv_cache,
                   stalled_seconds=stalled)


def assess(memory: Memory, reading: Reading, settings: Settings, now: float) -> Verdict:
    """Judge a fresh /metrics reading against the memory of the previous run."""
    memory = memory._replace(unresponsive=None)
    g = gauges(reading)
    base = memory.baseline
    if base is not None:
        why = restart_reason(base.reading, reading)
        if why:
            return _restarted(memory, reading, why, now)
        if not (0.0 <= now - base.at <= settings.max_age):
            base = None  # stale, or the clock jumped: compare with nothing rather than guess

    if all(e.asleep for e in reading.engines.values()):
        return _finish(_keep(memory, reading, now), SLEEPING, OK, wording.ASLEEP, g, now,
                       engines={n: SLEEPING for n in reading.engines})
    if base is None:
        new = _keep(memory, reading, now)
        if reading.work > 0:
            return _finish(new, BUSY, OK, wording.first_reading(g), g, now, action=REREAD,
                           engines={n: BUSY for n in reading.engines})
        return _idle(new, reading, g, now)

    prev, at = base
    gap = now - at
    allowed = allowance(memory.probe)
    if gap < settings.min_gap and not moved_engines(prev, reading, allowed):
        repeated = _repeat(memory, reading, gap, now)
        if repeated is not None:
            return repeated

    judged = {n: _engine(n, prev, e, memory, gap, at, now, allowed, settings) for n, e in reading.engines.items()}
    words = {n: w for n, (w, _) in judged.items()}
    stalls = {n: s for n, (_, s) in judged.items() if s is not None}
    new = _keep(memory, reading, now, stalls)
    rate_values = rates(prev, reading, gap, allowed)
    word = _top(words)
    if word == IDLE:
        return _idle(new, reading, g, now, words, rate_values)
    text = wording.engines(words, stalls, reading, now, settings) + wording.counts(g)
    if rate_values.tokens_per_second is not None and word == BUSY:
        text += f", {rate_values.tokens_per_second:.1f} tok/s"
    stalled = max((now - s.since for s in stalls.values()), default=0.0)
    return _finish(new, word, _CODE.get(word, OK), text, g, now, engines=words, stalled=stalled,
                   rate_values=rate_values)


# --------------------------------------------------------------------------- the idle probe


def _amend(verdict: Verdict, memory: Memory, word: str, code: int, text: str, now: float,
           outcome: ProbeOutcome) -> Verdict:
    """The idle verdict, finished by what the probe showed: everything else it measured stands."""
    last = Remembered(word, code, text, now, verdict.engines)
    return verdict._replace(word=word, code=code, text=text, action=None, probe_seconds=outcome.seconds,
                            memory=memory._replace(last=last))


def after_probe(verdict: Verdict, outcome: ProbeOutcome, reread: Reading | Failure | None, settings: Settings,
                now: float) -> Verdict:
    """Finish an idle verdict with the probe's outcome.

    An unanswered probe proves a stall only if a second reading shows the engine did nothing meanwhile:
    without `reread` that case comes back with action REREAD, and the caller calls again with one.
    """
    memory = verdict.memory
    if outcome.kind == ANSWERED:
        head = "" if verdict.word == IDLE else verdict.text + "; "
        spent = memory._replace(probe=Footprint(outcome.prompt_tokens, outcome.completion_tokens, now))
        return _amend(verdict, spent, verdict.word, OK, wording.probe_answered(head, outcome.seconds), now, outcome)
    if outcome.kind == REFUSED:
        return assess_failure(memory, Failure(DOWN, outcome.detail), settings, now)
    if outcome.kind == REJECTED:
        return _amend(verdict, memory, IDLE, WARNING, wording.probe_rejected(outcome.detail), now, outcome)
    if outcome.kind == CUT_SHORT:
        return _amend(verdict, memory, IDLE, WARNING, wording.probe_cut_short(outcome.detail), now, outcome)
    if reread is None:
        return verdict._replace(action=REREAD)
    return _unanswered(verdict, outcome, reread, settings, now)


def _unanswered(verdict: Verdict, outcome: ProbeOutcome, reread: Reading | Failure, settings: Settings,
                now: float) -> Verdict:
    """Timed out or 5xx, and a second reading to tell a stalled engine from a slow answer."""
    memory = verdict.memory
    if isinstance(reread, Failure):
        failed = assess_failure(memory, reread, settings, now)
        return failed._replace(text=f"{failed.text}; the probe failed too: {outcome.detail}")
    if memory.baseline is None:
        return _amend(verdict, memory, verdict.word, WARNING, wording.probe_no_reread(outcome.detail), now, outcome)
    prev = memory.baseline.reading
    if restart_reason(prev, reread):
        return _restarted(memory, reread, "process changed during the probe", now)
    moved = moved_engines(prev, reread, allowance(FAILED_PROBE))
    g = gauges(reread)
    new = _keep(memory, reread, now)
    if moved:
        word = BUSY if reread.work > 0 else IDLE
        return _finish(new, word, OK if word == BUSY else WARNING, wording.probe_unanswered_progress(g, outcome.detail),
                       g, now, engines={n: word for n in reread.engines}, probe=outcome.seconds)
    return _finish(new, STUCK, CRITICAL, wording.probe_unanswered_stuck(g, outcome.detail), g, now,
                   engines={n: STUCK for n in reread.engines}, probe=outcome.seconds, stalled=outcome.seconds)


# --------------------------------------------------------------------------- no reading


def assess_failure(memory: Memory, failure: Failure, settings: Settings, now: float,
                   restart_marker: float | None = None) -> Verdict:
    """Judge a run in which /metrics gave no reading (or proxy mode, which never reads it)."""
    kind = failure.kind
    streak = memory.unresponsive
    memory = memory._replace(unresponsive=None)
    if kind == PROXY:
        if failure.models_ok:
            return _finish(memory, PROXY, OK, wording.models(failure.model), None, now)
        return _finish(memory, PROXY, CRITICAL, f"/v1/models failed: {failure.detail}", None, now)
    if restart_marker is not None and 0.0 <= now - restart_marker <= settings.start_grace \
            and kind in (DOWN, UNRESPONSIVE, NO_METRICS):
        return _finish(memory, STARTING, WARNING, wording.starting(now - restart_marker, failure.detail), None, now)
    if kind == DOWN:
        return _finish(memory, DOWN, CRITICAL, failure.detail, None, now)
    if kind == UNRESPONSIVE:
        last_at = memory.last.at if memory.last else None
        if last_at is None or not 0.0 <= now - last_at <= settings.max_age:
            streak = None  # a streak from before a long gap (a host reboot, a clock jump) is not this streak
        streak = Streak(streak.since, streak.readings + 1) if streak and streak.since <= now else Streak(now, 1.0)
        lasted = now - streak.since
        critical = streak.readings >= settings.stuck_readings and lasted >= settings.stuck_seconds
        return _finish(memory._replace(unresponsive=streak), UNRESPONSIVE, CRITICAL if critical else WARNING,
                       wording.unresponsive(failure.detail, streak, now), None, now, stalled=lasted)
    # no metrics: liveness from /v1/models only
    if failure.models_ok:
        return _finish(memory, NO_METRICS, WARNING, f"{failure.detail}; {wording.models(failure.model)}", None, now)
    return _finish(memory, NO_METRICS, CRITICAL, f"{failure.detail}; /v1/models failed too", None, now)
