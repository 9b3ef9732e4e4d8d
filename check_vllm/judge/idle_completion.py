"""The idle completion's outcome judged (the 1-token completion sent when no work is in sight; "probe" in this package
always means it, never an orchestrator's probe): (idle verdict, outcome, re-read) -> Verdict. Pure.

It judges the probe, never silence: a probe refused, or answered by an API server whose engine died, is a
run without a reading (probe_failure), judged where every such run is.

An answered probe proves an idle engine alive. An unanswered one proves nothing by itself: a
re-read that shows any movement (the probe's own work included: a late answer is still an answer)
or work in sight is a live engine, judged by the per-engine rule; only "nothing moved, nothing in
sight" counts, and it must hold over the same readings and seconds as every other stuck
(check_vllm.judge.proof) before it is CRITICAL.
"""

from __future__ import annotations

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant, instant
from check_vllm.contract.kept import Footprint, Memory, Remembered
from check_vllm.contract.values import (
    ANSWERED,
    CUT_SHORT,
    ENGINE_DEAD,
    NO_ANSWER,
    REFUSED,
    REJECTED,
    Failure,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import BUSY, CONFIRM, DOWN, IDLE, OK, STALLING, STUCK, WARNING
from check_vllm.judge import wording
from check_vllm.judge.assess import new_process
from check_vllm.judge.compare import counted, gauges, moved_engines, restart_reason, signals_differ
from check_vllm.judge.finish import finish, keep
from check_vllm.judge.proof import extend, lasted, proven


def _amend(verdict: Verdict, memory: Memory, word: str, code: int, text: str, now: Instant,
           outcome: ProbeOutcome) -> Verdict:
    """The idle verdict, finished by what the probe showed: everything else it measured stands."""
    last = Remembered(word, code, text, now.wall, verdict.engines)
    return verdict._replace(word=word, code=code, text=text, action=None, probe_seconds=outcome.seconds,
                            memory=memory._replace(last=last))


def probe_failure(outcome: ProbeOutcome) -> Failure | None:
    """A probe that found no server to judge (refused, or an engine its API server calls dead): a run without a
    reading from here on, for the one judge of those (check_vllm.judge.no_reading). None for every other outcome."""
    if outcome.kind == REFUSED:
        return Failure(DOWN, outcome.detail)
    if outcome.kind == ENGINE_DEAD:
        return Failure(DOWN, outcome.detail, dead_engine=True)
    return None


def needs_reading(outcome: ProbeOutcome) -> bool:
    """No answer (a time-out, a 5xx) proves nothing by itself: a reading taken now tells a stalled engine from a
    slow one (after_probe asks for it with CONFIRM when called without one)."""
    return outcome.kind == NO_ANSWER


def after_probe(verdict: Verdict, outcome: ProbeOutcome, reread: Reading | None, settings: Settings,
                now: Instant | float) -> Verdict:
    """Finish an idle verdict with the probe's outcome (one probe_failure gives no verdict here).

    An unanswered probe needs a second reading: without `reread` that case comes back with action
    CONFIRM, and the caller calls again with one (or, if the reading failed, asks the judge of silence).
    """
    now = instant(now)
    memory = verdict.memory
    pending = verdict.word in (STALLING, STUCK)  # idle, still standing on an earlier unanswered probe
    if outcome.kind == ANSWERED:
        if pending:  # the engine answers: the pending word ends
            verdict = verdict._replace(word=IDLE, engines={n: IDLE for n in verdict.engines})
        head = "" if verdict.word == IDLE else verdict.text + "; "
        spent = memory._replace(probe=Footprint(outcome.prompt_tokens, outcome.completion_tokens, now.wall),
                                unanswered=None)
        return _amend(verdict, spent, verdict.word, OK, wording.probe_answered(head, outcome.seconds), now, outcome)
    if pending and outcome.kind in (REJECTED, CUT_SHORT):  # proves nothing: the pending word stands
        return _amend(verdict, memory, verdict.word, verdict.code, f"{verdict.text}; the probe proved nothing: "
                      f"{outcome.detail}", now, outcome)
    if outcome.kind == REJECTED:
        return _amend(verdict, memory, IDLE, WARNING, wording.probe_rejected(outcome.detail), now, outcome)
    if outcome.kind == CUT_SHORT:
        return _amend(verdict, memory, IDLE, WARNING, wording.probe_cut_short(outcome.detail), now, outcome)
    if reread is None and needs_reading(outcome):
        return verdict._replace(action=CONFIRM)
    if reread is None:  # refused, or a dead engine: no verdict of the probe's (probe_failure)
        raise ValueError(f"a {outcome.kind!r} probe is a run without a reading: judge it with judge.no_reading")
    return _unanswered(verdict, outcome, reread, settings, now)


def _unanswered(verdict: Verdict, outcome: ProbeOutcome, reread: Reading, settings: Settings,
                now: Instant) -> Verdict:
    """Timed out or 5xx, and a second reading to tell a stalled engine from a slow one."""
    memory = verdict.memory
    base = memory.baseline
    if base is None:
        return _amend(verdict, memory, verdict.word, WARNING, wording.probe_no_reread(outcome.detail), now, outcome)
    why = restart_reason(base.reading, reread)
    if why:
        return new_process(memory, reread, "process changed during the probe", settings, now)
    pairs = [(base.reading.engines[n], e) for n, e in reread.engines.items() if n in base.reading.engines]
    if not pairs or any(signals_differ(p, e) or not counted(p, e) for p, e in pairs):
        text = wording.probe_no_reread(f"{outcome.detail}; the second page lacked counters the first had")
        return _amend(verdict, memory, verdict.word, WARNING, text, now, outcome)
    g = gauges(reread)
    if moved_engines(base.reading, reread, {}):  # any movement: the engine serves, the probe's own work included
        word = BUSY if reread.work > 0 else IDLE
        return finish(keep(memory._replace(unanswered=None), reread, now), word,
                      wording.probe_unanswered_progress(g, outcome.detail), g, now,
                      engines={n: word for n in reread.engines}, probe=outcome.seconds,
                      state=OK if word == BUSY else WARNING)
    # Nothing moved. Our probe may be in sight as waiting (live metrics: never "idle") or not even that;
    # either way the condition is "no progress while a probe went unanswered", proven like any stuck.
    streak = extend(memory.unanswered, base.at, now)
    new = keep(memory._replace(unanswered=streak), reread, now)
    word = STUCK if proven(streak, now, settings) else STALLING
    text = wording.probe_unanswered(g, outcome.detail, streak, now, settings, word == STUCK)
    return finish(new, word, text, g, now,
                  engines={n: word for n in reread.engines}, probe=outcome.seconds, stalled=lasted(streak, now))
