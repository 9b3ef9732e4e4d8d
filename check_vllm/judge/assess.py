"""The decision on a /metrics reading: (memory, reading, settings, now) -> Verdict, carrying the next memory.

Pure: no I/O, no clock, no httpx, no nagiosplugin. The check keeps the memory in a file between
runs and the Netdata collector keeps it in memory; both call these functions, so they never disagree.

Work present plus movement of ANY progress signal is busy and healthy; stuck needs work present and
no movement, proven by check_vllm.judge.proof. Counters of two processes are never compared. The
idle completion's outcome is judged in check_vllm.judge.idle_completion, a run without a reading in check_vllm.judge.no_reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant, elapsed, instant
from check_vllm.contract.kept import Baseline, Memory, Remembered, Streak
from check_vllm.contract.values import EngineReading, Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import (
    BALANCER,
    BUSY,
    CRITICAL,
    ENGINE_RANK,
    IDLE,
    OK,
    PROBE,
    REREAD,
    RESTARTED,
    SLEEPING,
    STALLING,
    STUCK,
    WARNING,
    WORKING,
    state_of,
)
from check_vllm.judge import wording
from check_vllm.judge.compare import (
    START_TOLERANCE,
    Gauges,
    Rates,
    allowance,
    comparable,
    continues,
    families,
    gauges,
    identified,
    lost_signals,
    moved_engines,
    progressed,
    rates,
    restart_reason,
    signals_differ,
)
from check_vllm.judge.finish import NO_RATES, finish, keep
from check_vllm.judge.proof import extend, lasted, proven


def _idle(memory: Memory, reading: Reading, g: Gauges, now: Instant, words: Mapping[str, str] | None = None,
          rate_values: Rates = NO_RATES) -> Verdict:
    text = wording.NOT_PROBED if reading.work <= 0 else wording.lagging(g)  # work only lagging gauges show
    return finish(memory, IDLE, text, g, now, action=PROBE,
                  engines=words or {n: IDLE for n in reading.engines}, rate_values=rate_values, unprobed=True, state=OK)


def _pending(memory: Memory, reading: Reading, g: Gauges, now: Instant, rate_values: Rates = NO_RATES) -> Verdict:
    """Idle, nothing moved since a probe went unanswered, and no probe this time: the last probe's word stands
    (a run that did not probe proves nothing new, least of all health); it never grows to stuck unprobed."""
    streak = memory.unanswered
    assert streak is not None
    last = memory.last.word if memory.last else None
    word = last if last in (STALLING, STUCK) else STALLING
    return finish(memory, word, wording.probe_pending(g, streak, now), g, now, action=PROBE,
                  engines={n: word for n in reading.engines}, stalled=lasted(streak, now), rate_values=rate_values)


def unproven_idle(last: Remembered) -> bool:
    """An idle verdict no probe settled: a probing run must not repeat it as its own."""
    return last.word == IDLE and last.unprobed


def new_process(memory: Memory, reading: Reading, why: str, settings: Settings, now: Instant) -> Verdict:
    """A reading no process of the baseline's could have produced: a restart, or a second server in turn."""
    g = gauges(reading)
    new = keep(memory._replace(unanswered=None), reading, now)
    base, before = memory.baseline, memory.previous
    older = base is not None and base.reading.process_start is not None and reading.process_start is not None \
        and reading.process_start < base.reading.process_start - START_TOLERANCE
    gap = elapsed(before.at, now) if before is not None else None
    # counters alone are no identity: a new process soon passes a fresh page's counters (multiprocess mode)
    resumed = before is not None and gap is not None and 0 <= gap <= settings.max_age \
        and identified(before.reading, reading) and continues(before.reading, reading)
    if older or resumed:
        text = wording.balancer("a process older than the one before" if older else "the process seen before")
        return finish(new, BALANCER, text, g, now, engines={n: BALANCER for n in reading.engines})
    asleep = all(e.asleep for e in reading.engines.values())
    return finish(new, RESTARTED, wording.restarted(reading, why, g, now.wall), g, now,
                  action=PROBE if reading.work <= 0 and not asleep else None,
                  engines={n: RESTARTED for n in reading.engines})


def _top(words: Mapping[str, str]) -> str:
    word = next(w for w in ENGINE_RANK if w in words.values())
    return IDLE if word == SLEEPING and IDLE in words.values() else word


# --------------------------------------------------------------------------- the per-engine rule


def _standing_word(prior: str | None, cur: EngineReading) -> str:
    """A comparison that proves nothing (too short a gap, a page missing signals): the stall neither
    grows nor ends, the engine's last word stands."""
    if cur.work > 0:
        return prior if prior in (STALLING, STUCK) else BUSY
    return IDLE if prior in WORKING or prior is None else prior


def _engine(name: str, base: Baseline, cur: EngineReading, memory: Memory, gap: float, now: Instant,
            allowed: dict[str, float], settings: Settings) -> tuple[str, Streak | None]:
    """The per-engine rule: this engine's word, and its no-progress streak if it has one."""
    p = base.reading.engines.get(name)
    if cur.asleep:
        return SLEEPING, None
    if p is not None and progressed(p, cur, allowed):
        return (BUSY if cur.work > 0 or cur.lagging_gauges else IDLE), None
    if cur.live_work <= 0:  # gauges written now and then prove no work: the idle probe tells
        return IDLE, None
    if cur.coarse:  # its counters printed too coarsely to stand still: progress cannot be told, no stall judged
        return BUSY, None
    if p is None or not comparable(p, cur):
        return BUSY, None  # an engine we have not seen, or no signal on both pages: nothing to compare
    old = memory.stalls.get(name)
    if gap < settings.min_gap or signals_differ(p, cur):
        if cur.work > 0 and not families(cur) <= families(p):
            # counters back after a page cut short may have moved unseen since the stall began: it ends, and
            # only a comparison of the same signals can prove one again (kept, it was CRITICAL 85 s after progress)
            return BUSY, None
        prior = memory.last.engines.get(name) if memory.last and old else None
        word = _standing_word(prior, cur)
        return word, (old if old and word != BUSY else None)
    streak = extend(old, base.at, now)
    return (STUCK if proven(streak, now, settings) else STALLING), streak


def _repeat(memory: Memory, reading: Reading, gap: float, now: Instant) -> Verdict | None:
    """Runs closer together than min_gap with nothing moved: keep the older baseline, repeat the last verdict.

    None when there is no work and nothing fit to repeat (work gone since a busy/stalling/stuck verdict,
    or a verdict that was no judgement of progress): with no work a short gap cannot wrongly call
    anything stalled, so the caller judges afresh (and probes).
    """
    last = memory.last or Remembered("", None, "", None)
    word, code = last.word, last.code
    if reading.work <= 0 and (word in WORKING or unproven_idle(last)):
        return None
    engines = {n: _standing_word(last.engines.get(n), e) for n, e in reading.engines.items()}
    if word in WORKING or (word == IDLE and reading.work > 0):
        word = _top(engines)
        code = state_of(word, OK)
    if word not in (*WORKING, IDLE, RESTARTED) or code not in (OK, WARNING, CRITICAL):
        if reading.work <= 0:
            return None  # nothing worth repeating (down, a failed probe...): judge afresh
        word, code = BUSY, OK
    g = gauges(reading)
    stalled = max((lasted(s, now) for n, s in memory.stalls.items() if engines.get(n) in (STUCK, STALLING)),
                  default=0.0)
    text = wording.repeated(g, gap)
    # words that differ from the last verdict's (a stall whose work went, work come to an idle engine) are kept:
    # the next repeat starts from what this one said, never from an older stall it already ended
    if (word, code, engines) != (last.word, last.code, dict(last.engines)):
        memory = memory._replace(last=last._replace(word=word, code=code, text=text,
                                                    engines=MappingProxyType(dict(engines))),
                                 stalls=MappingProxyType({n: s for n, s in memory.stalls.items()
                                                          if engines.get(n) in (STUCK, STALLING)}))
    return Verdict(word=word, code=code, text=text, memory=memory,
                   engines=MappingProxyType(engines), running=g.running, waiting=g.waiting, kv_cache=g.kv_cache,
                   stalled_seconds=stalled)


# --------------------------------------------------------------------------- a reading


def assess(memory: Memory, reading: Reading, settings: Settings, now: Instant | float) -> Verdict:
    """Judge a fresh /metrics reading against the memory of the previous run."""
    now = instant(now)
    memory = memory._replace(unresponsive=None, starts=None, stopping=None)  # /metrics answered: it serves
    g = gauges(reading)
    base = memory.baseline
    gap = None
    if base is not None:
        why = restart_reason(base.reading, reading)
        if why:
            return new_process(memory, reading, why, settings, now)
        gap = elapsed(base.at, now)
    if base is None or gap is None or gap < 0.0 or (gap > settings.max_age and not _same_process(base, reading, now)):
        return _first(memory, reading, g, now)  # stale, another boot, or none: compare with nothing
    allowed = allowance(memory.probe)
    moved = moved_engines(base.reading, reading, allowed)
    if moved or any(e.live_work > 0 for e in reading.engines.values()):
        # life, or work in sight: the idle streak ends, and the per-engine rule judges the work afresh
        # (carrying the streak over would count readings that did not all show the condition)
        memory = memory._replace(unanswered=None)
    if all(e.asleep for e in reading.engines.values()):
        return finish(keep(memory, reading, now), SLEEPING, wording.ASLEEP, g, now,
                      engines={n: SLEEPING for n in reading.engines})
    if gap < settings.min_gap and not moved:
        repeated = _repeat(memory, reading, gap, now)
        if repeated is not None:
            return repeated
    judged = {n: _engine(n, base, e, memory, gap, now, allowed, settings) for n, e in reading.engines.items()}
    words = {n: w for n, (w, _) in judged.items()}
    stalls = {n: s for n, (_, s) in judged.items() if s is not None}
    lossy = any(lost_signals(base.reading.engines[n], e) for n, e in reading.engines.items()
                if n in base.reading.engines and not e.coarse)  # a rounded page is the baseline from now on
    # a page missing signals the baseline had is no baseline for the next run either: keep the fuller one
    new = memory._replace(stalls=MappingProxyType(stalls)) if lossy else keep(memory, reading, now, stalls)
    # an old baseline of the same process still proves what did not move; its rates are no news
    rate_values = rates(base.reading, reading, gap, allowed) if gap <= settings.max_age else NO_RATES
    word = _top(words)
    if word == IDLE:
        if new.unanswered is not None:  # nothing moved and no work since the probe went unanswered
            return _pending(new, reading, g, now, rate_values)
        return _idle(new, reading, g, now, words, rate_values)
    text = wording.engines(words, stalls, reading, now, settings) + wording.counts(g)
    if rate_values.tokens_per_second is not None and word == BUSY:
        text += f", {rate_values.tokens_per_second:.1f} tok/s"
    elif rate_values.steps_per_second is not None and word == BUSY:  # an engine that counts tokens only at the end
        text += f", {rate_values.steps_per_second:.1f} steps/s"
    text += wording.coarse(reading)
    stalled = max((lasted(s, now) for s in stalls.values()), default=0.0)
    return finish(new, word, text, g, now, engines=words, stalled=stalled,
                  rate_values=rate_values, state=state_of(word, OK))


def _same_process(base: Baseline, reading: Reading, now: Instant) -> bool:
    """A baseline older than max_age still counts for the proof when it is of the same process, timed on
    this boot's clock: counters of one process never go back, so nothing moved means nothing moved since."""
    same_boot = base.at.boot is not None and base.at.boot == now.boot and base.at.mono is not None
    return same_boot and continues(base.reading, reading)


def _first(memory: Memory, reading: Reading, g: Gauges, now: Instant) -> Verdict:
    """No usable baseline: nothing to compare, so no stall can be judged, and no earlier streak continues."""
    new = keep(memory._replace(unanswered=None), reading, now)
    if all(e.asleep for e in reading.engines.values()):
        return finish(new, SLEEPING, wording.ASLEEP, g, now, engines={n: SLEEPING for n in reading.engines})
    # lagging gauges showing no work prove no idle either: only a comparison tells before a probe may go
    if reading.work > 0 or any(e.lagging_gauges for e in reading.engines.values()):
        return finish(new._replace(unanswered=None), BUSY, wording.first_reading(g), g, now, action=REREAD,
                      engines={n: BUSY for n in reading.engines})
    return _idle(new, reading, g, now)
