"""Quiet on purpose: a stall its own server explains. (verdict, reading, what the server said) -> Verdict. Pure.

No progress while work is present is what a hung engine shows, and also what an engine paused on purpose
shows: an RL trainer's pause around a weight update (verl, OpenRLHF, prime-rl), a checkpoint, weights moving
in. Restarting it kills work, so a pause the server states is its own word (`paused`), never restartable, and
its stall streak ends: a real stall after the pause is proven from its own start. From vLLM 0.33 a pause with
mode wait or abort turns new requests away (HTTP 503 "Generation is paused"): the idle probe's answer is the
engine's own word (turned_away), and GET /checkpoint/status (0.34) says whether a checkpoint holds it.

A faulted engine held for recovery (--enable-fault-tolerance) is not proven stuck within vLLM's
engine_recovery_timeout_sec (recovering). Waiting work all "deferred" (a KV transfer from a prefill instance, a
LoRA budget, a grammar compiling) is the scheduler's last word, which an engine hung between two requests keeps
for ever: `kv transfer` holds only while the stall is unproven, and a 1-token probe (no slot anyone waits for)
tells a wait from a hang (deferred). The server is asked only on a stall (asks_server, asks_faults), a checkpoint
only after a request was turned away as paused; a 404 is not asked again until the process changes.
"""

from __future__ import annotations

from types import MappingProxyType

from check_vllm.contract.defaults import Settings
from check_vllm.contract.engines import BY_KEY
from check_vllm.contract.instants import Instant, elapsed, instant
from check_vllm.contract.kept import Footprint, Memory, Remembered, Streak
from check_vllm.contract.values import (
    ANSWERED,
    NO_ANSWER,
    NO_PAUSE_ROUTE,
    PAUSED_YES,
    Checkpoint,
    EngineFault,
    Failure,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import KV_TRANSFER, OK, PAUSED, PROBE, PROBE_DEFERRED, STALLING, STUCK, WARNING
from check_vllm.judge import wording
from check_vllm.judge.compare import Rates, gauges, moved_engines, restart_reason
from check_vllm.judge.finish import finish

_STALLED = (STALLING, STUCK)
#: The fault-tolerance states of an engine vLLM holds for recovery (EngineCoreSentinel.on_fault); "dead" is not.
_HELD = ("diagnosing", "unhealthy")


def concerns(verdict: Verdict) -> bool:
    """Whether this judgement has anything to add: a stall, or a pause to end (a run that sees neither skips it)."""
    return verdict.word in _STALLED or verdict.memory.paused is not None


def _unknown_route(known: float | None, reading: Reading) -> bool:
    return known is None or reading.process_start is None or known != reading.process_start


def asks_server(verdict: Verdict, reading: Reading) -> bool:
    """Ask GET /is_paused: only for a stall, only when the weights gauge does not already say so, and never
    again of a process that answered 404."""
    if verdict.word not in _STALLED or (reading.weight_updates or 0) > 0:
        return False
    return _unknown_route(verdict.memory.no_pause_route, reading)


def asks_faults(verdict: Verdict, reading: Reading) -> bool:
    """Ask the fault-tolerance status: only for a stall, never again of a process that has no such route."""
    return verdict.word in _STALLED and _unknown_route(verdict.memory.no_fault_route, reading)


def asks_checkpoint(memory: Memory, reading: Reading) -> bool:
    """Ask GET /checkpoint/status (after a request was turned away as paused) unless this process answered 404."""
    return _unknown_route(memory.no_checkpoint_route, reading)


def _deferred(verdict: Verdict, reading: Reading) -> bool:
    """Every stalled engine runs nothing and all its waiting work is deferred."""
    stalled = [reading.engines[n] for n, w in verdict.engines.items() if w in _STALLED and n in reading.engines]
    return bool(stalled) and all(e.running <= 0 < e.waiting <= (e.deferred or 0.0) for e in stalled)


def _route(memory: Memory, reading: Reading, said: object, field: str) -> Memory:
    """A 404 remembered for this process."""
    if said != NO_PAUSE_ROUTE or reading.process_start is None:
        return memory
    return Memory(**{**memory._asdict(), field: reading.process_start})


def on_purpose(verdict: Verdict, reading: Reading, said: str | None, settings: Settings, now: Instant | float,
               faults: tuple[EngineFault, ...] | str | None = None) -> Verdict:
    """The verdict, or the quiet word its server explains; `said`: what GET /is_paused answered, `faults`: the
    fault-tolerance status (None: not asked). A deferred stall comes back with action PROBE_DEFERRED: the caller
    probes and hands the outcome to deferred()."""
    now = instant(now)
    if verdict.word == PAUSED:  # the engine's own answer said so already (turned_away)
        return verdict
    memory = _route(_route(verdict.memory, reading, said, "no_pause_route"), reading, faults, "no_fault_route")
    weights = (reading.weight_updates or 0) > 0
    if verdict.word not in _STALLED:
        if memory.paused is None or verdict.action == PROBE:  # an idle run not probed says nothing of the pause
            return verdict._replace(memory=memory)
        return verdict._replace(memory=memory._replace(paused=None))
    if weights and said != PAUSED_YES:
        memory, idle_for = _weight_ops(memory, reading, now)
        if idle_for is not None and idle_for > settings.pause_grace:  # a dead trainer's transfer: a stall
            text = wording.weights_stand(reading.weight_updates or 0.0, idle_for) + verdict.text
            return verdict._replace(text=text, memory=memory)
    if said == PAUSED_YES or weights:
        how = "weights are moving in (vllm:rl_weight_update_operations_in_flight)" if weights else \
            f"its server says the engine is paused (GET {BY_KEY[reading.engine].routes.paused})"
        return _paused(memory, reading, how, settings, now, _rates(verdict))
    if memory.paused is not None:  # the pause just ended, nothing moves: the stall's proof starts now, not at a
        # reading taken while it was paused (conservative: it may have resumed only just now)
        memory = memory._replace(paused=None, stalls=MappingProxyType({n: Streak(now, 1.0) for n in memory.stalls}))
    verdict = verdict._replace(memory=memory)
    if isinstance(faults, tuple) and any(f.status in _HELD for f in faults):
        return _recovering(verdict, tuple(f for f in faults if f.status in _HELD), settings, now)
    if _deferred(verdict, reading):
        return verdict._replace(action=PROBE_DEFERRED)
    return verdict


def _weight_ops(memory: Memory, reading: Reading, now: Instant) -> tuple[Memory, float | None]:
    """Weight-update operations in flight: since when none finished (the pause's start counts from the last that
    did: `paused` moves with them), or None where the page has no count of finished operations (older vLLM)."""
    before = memory.previous.reading.weight_ops if memory.previous is not None else None
    if reading.weight_ops is None:
        return memory, None
    if before is None or reading.weight_ops > before or memory.paused is None:
        memory = memory._replace(paused=now)  # operations finish (or the first look): a live transfer
    return memory, max(elapsed(memory.paused, now) or 0.0, 0.0) if memory.paused is not None else None


def _ended(memory: Memory) -> Memory:
    """The stall streaks end: what the server explains is no part of a stall's proof."""
    return memory._replace(stalls=MappingProxyType({}), unanswered=None)


def _rates(verdict: Verdict) -> Rates:
    """The rates the stall verdict measured: a quiet word changes what they mean, not what they were."""
    return Rates(**{name: getattr(verdict, name) for name in Rates._fields})


def _amended(verdict: Verdict, word: str, code: int, text: str, now: Instant, action: str | None = None,
             memory: Memory | None = None) -> Verdict:
    """The stall verdict in other words: what it measured stands, and the memory remembers the new word."""
    memory = memory or verdict.memory
    engines = {n: (word if w in _STALLED else w) for n, w in verdict.engines.items()}
    last = Remembered(word, code, text, now.wall, MappingProxyType(engines))
    return verdict._replace(word=word, code=code, text=text, action=action, engines=MappingProxyType(engines),
                            memory=memory._replace(last=last))


def _paused(memory: Memory, reading: Reading, how: str, settings: Settings, now: Instant, rates: Rates,
            failed: bool = False, probe: float | None = None) -> Verdict:
    since = memory.paused or now
    span = max(elapsed(since, now) or 0.0, 0.0)
    g = gauges(reading)
    code = OK if span <= settings.pause_grace and not failed else WARNING
    text = f"{how}; {wording.counts(g)}" if failed else wording.paused(how, span, settings.pause_grace, g)
    return finish(_ended(memory)._replace(paused=since), PAUSED, text, g, now,
                  engines={n: PAUSED for n in reading.engines}, rate_values=rates, probe=probe, state=code)


def turned_away(verdict: Verdict, reading: Reading, outcome: ProbeOutcome, checkpoint: Checkpoint | None,
                settings: Settings, now: Instant | float) -> Verdict:
    """The probe was turned away as paused (vLLM >= 0.33, ENGINE_PAUSED): paused by the engine's own word, a
    checkpoint said as such (`checkpoint`: GET /checkpoint/status, None when not asked)."""
    now = instant(now)
    memory = _route(verdict.memory, reading, checkpoint.state if checkpoint else None, "no_checkpoint_route")
    state = checkpoint.state if checkpoint else ""
    how = wording.turned_away(outcome.detail, state, checkpoint.error if checkpoint else "")
    return _paused(memory, reading, how, settings, now, _rates(verdict), state == "failed", outcome.seconds)


def _recovering(verdict: Verdict, held: tuple[EngineFault, ...], settings: Settings, now: Instant) -> Verdict:
    """A stall on a server that holds a faulted engine for recovery: within vLLM's window not stuck (the streak
    goes on), past it the stall stands, said with the fault."""
    span = verdict.stalled_seconds or 0.0
    within = span <= settings.recovery_window
    said = wording.recovering(held, span, settings.recovery_window, within)
    if within:
        return _amended(verdict, STALLING, WARNING, f"{said}; {verdict.text}", now, verdict.action)
    return verdict._replace(text=f"{verdict.text}; {said}")


def deferred(verdict: Verdict, reading: Reading, outcome: ProbeOutcome | None, reread: Reading | None,
             settings: Settings, now: Instant | float) -> Verdict:
    """A stall whose waiting work is all deferred, after the probe on_purpose asked for (`outcome` None: not
    probed; `reread`: the reading after an unanswered one). An engine that answers, or moves, is waiting on
    something else: `kv transfer`, and its stall ends. Otherwise the stall holds as `kv transfer` while it is
    unproven, and stands once proven: never beyond the proof window unprobed."""
    now = instant(now)
    g = gauges(reading)
    moved = reread is not None and restart_reason(reading, reread) is None and bool(moved_engines(reading, reread, {}))
    if outcome is not None and (outcome.kind == ANSWERED or moved):
        memory = _ended(verdict.memory)
        if outcome.kind == ANSWERED:
            memory = memory._replace(probe=Footprint(outcome.prompt_tokens, outcome.completion_tokens, now.wall))
        text = wording.deferred_alive(g, outcome.seconds, outcome.kind == ANSWERED)
        return _amended(verdict, KV_TRANSFER, WARNING, text, now, memory=memory)._replace(
            probe_seconds=outcome.seconds, stalled_seconds=0.0)
    if outcome is not None and outcome.kind == NO_ANSWER and reread is not None:
        return _amended(verdict, verdict.word, verdict.code, wording.deferred_unanswered(verdict.text, outcome.detail),
                        now)._replace(probe_seconds=outcome.seconds)
    why = outcome.detail if outcome is not None else ""
    if verdict.word == STUCK:
        return _amended(verdict, STUCK, verdict.code, wording.deferred_unprobed(verdict.text, why), now)
    return _amended(verdict, KV_TRANSFER, WARNING, wording.kv_transfer(g, why), now)


def holds_itself(memory: Memory, failure: Failure, settings: Settings, now: Instant) -> Verdict:
    """A server that answers, in its own words, that it holds itself on purpose (vLLM's elastic EP scaling: a
    pause, OK within --pause-grace and WARNING past it, never restarted; a retired rank awaiting shutdown:
    stopping, its orchestrator's to end). No reading, so no stall is proven meanwhile."""
    if failure.kind != PAUSED:
        return finish(memory._replace(paused=None), failure.kind, failure.detail, None, now)
    since = memory.paused or now
    span = max(elapsed(since, now) or 0.0, 0.0)
    return finish(_ended(memory)._replace(paused=since), PAUSED,
                  wording.holds_itself(failure.detail, span, settings.pause_grace), None, now,
                  state=OK if span <= settings.pause_grace else WARNING)


def let_sleep(verdict: Verdict, asleep: bool | None, sleeps_after: float | None, now: Instant | float) -> Verdict:
    """An idle engine whose server sleeps when idle (llama.cpp's --sleep-idle-seconds) is not probed: asleep, a
    probe would wake it and reload its model; awake, it would restart the idle timer, and a server checked more
    often than that would never sleep. It stays `idle` (in rotation): unlike an engine put to sleep, it takes the
    next request and wakes for it. `asleep`: what its server said (None: not asked, or no answer); `sleeps_after`:
    the idle seconds its command line gives (None: not known here)."""
    if asleep:
        text = wording.DOZING
    elif sleeps_after:
        text = wording.sleeps_after(sleeps_after)
    else:
        return verdict
    return _amended(verdict, verdict.word, verdict.code, text, instant(now))
