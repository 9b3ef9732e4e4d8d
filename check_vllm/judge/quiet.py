"""Quiet on purpose: a stall its own server explains. (verdict, reading, what /is_paused said) -> Verdict. Pure.

No progress while work is present is what a hung engine shows, and also what an engine paused on purpose
shows: an RL trainer's `POST /pause` around a weight update (verl, OpenRLHF, prime-rl), a checkpoint, weights
moving in. And a decode instance whose waiting work is all deferred on a KV transfer from its prefill instance
moves nothing while that side is slow or gone. Restarting either kills work or helps nothing, so a stall the
server explains is its own word (`paused`, `kv transfer`), never restartable, and its stall streak ends: a
real stall after the pause is proven from its own start. Only a stall asks the server (asks_server), and a
server that answered 404 (not in dev mode) is not asked again until its process changes.
"""

from __future__ import annotations

from types import MappingProxyType

from check_vllm.contract.values import NO_PAUSE_ROUTE, PAUSED_YES, Instant, Memory, Reading, Streak, Verdict
from check_vllm.contract.vocab import KV_TRANSFER, OK, PAUSED, STALLING, STUCK, WARNING, Settings
from check_vllm.judge import wording
from check_vllm.judge.assess import finish
from check_vllm.judge.compare import Rates, gauges
from check_vllm.judge.proof import elapsed, instant

_STALLED = (STALLING, STUCK)


def concerns(verdict: Verdict) -> bool:
    """Whether this judgement has anything to add: a stall, or a pause to end (a run that sees neither skips it)."""
    return verdict.word in _STALLED or verdict.memory.paused is not None


def asks_server(verdict: Verdict, reading: Reading) -> bool:
    """Ask GET /is_paused: only for a stall, only when the weights gauge does not already say so, and never
    again of a process that answered 404."""
    if verdict.word not in _STALLED or (reading.weight_updates or 0) > 0:
        return False
    known = verdict.memory.no_pause_route
    return known is None or reading.process_start is None or known != reading.process_start


def _deferred(verdict: Verdict, reading: Reading) -> bool:
    """Every stalled engine runs nothing and all its waiting work is deferred (on a KV transfer)."""
    stalled = [reading.engines[n] for n, w in verdict.engines.items() if w in _STALLED and n in reading.engines]
    return bool(stalled) and all(e.running <= 0 < e.waiting <= (e.deferred or 0.0) for e in stalled)


def on_purpose(verdict: Verdict, reading: Reading, said: str | None, settings: Settings,
               now: Instant | float) -> Verdict:
    """The verdict, or the quiet word its server explains; `said`: what GET /is_paused answered (None: not asked)."""
    now = instant(now)
    memory = verdict.memory
    if said == NO_PAUSE_ROUTE and reading.process_start is not None:
        memory = memory._replace(no_pause_route=reading.process_start)
    weights = (reading.weight_updates or 0) > 0
    if verdict.word not in _STALLED:
        return verdict._replace(memory=memory._replace(paused=None)) if memory.paused is not None else verdict
    if said == PAUSED_YES or weights:
        how = "weights are moving in (vllm:rl_weight_update_operations_in_flight)" if weights else \
            "its server says the engine is paused (GET /is_paused)"
        return _paused(memory, reading, how, settings, now, _rates(verdict))
    if memory.paused is not None:  # the pause just ended, nothing moves: the stall's proof starts now, not at a
        # reading taken while it was paused (conservative: it may have resumed only just now)
        memory = memory._replace(paused=None, stalls=MappingProxyType({n: Streak(now, 1.0) for n in memory.stalls}))
    if _deferred(verdict, reading):
        quiet = _ended(memory)
        return finish(quiet, KV_TRANSFER, WARNING, wording.kv_transfer(gauges(reading)), gauges(reading), now,
                      engines={n: KV_TRANSFER for n in reading.engines}, rate_values=_rates(verdict))
    return verdict._replace(memory=memory)


def _ended(memory: Memory) -> Memory:
    """The stall streaks end: what the server explains is no part of a stall's proof."""
    return memory._replace(stalls=MappingProxyType({}), unanswered=None)


def _rates(verdict: Verdict) -> Rates:
    """The rates the stall verdict measured: a quiet word changes what they mean, not what they were."""
    return Rates(**{name: getattr(verdict, name) for name in Rates._fields})


def _paused(memory: Memory, reading: Reading, how: str, settings: Settings, now: Instant, rates: Rates) -> Verdict:
    since = memory.paused or now
    span = max(elapsed(since, now) or 0.0, 0.0)
    g = gauges(reading)
    code = OK if span <= settings.pause_grace else WARNING
    return finish(_ended(memory)._replace(paused=since), PAUSED, code, wording.paused(how, span, settings.pause_grace, g),
                  g, now, engines={n: PAUSED for n in reading.engines}, rate_values=rates)
