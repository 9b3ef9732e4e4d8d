"""One observation of a server: read /metrics, judge, and only if the verdict asks, read again or probe.

Shared by the check (one call per run) and the Netdata collector (one call per tick). This module
only sequences calls against the deadline: what to do next is the verdict's `action`, decided by the
judge; each request gets a timeout cut to what is left of the caller's deadline, so a slow server
earns a specific verdict ("unresponsive") instead of the caller's blunt time-out.

Which /metrics page each read asks for, and every call's timeout: check_vllm.server.calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import httpx

from check_vllm.contract.defaults import Options, Settings
from check_vllm.contract.instants import Instant, instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import CUT_SHORT, ENGINE_PAUSED, Evidence, Failure, ProbeOutcome, Reading, Witness
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import DOWN, LOOK_AGAIN, PROBE, PROBE_DEFERRED, PROXY, REREAD, UNRESPONSIVE
from check_vllm.judge.assess import assess
from check_vllm.judge.quiet import (
    asks_checkpoint,
    asks_faults,
    asks_server,
    concerns,
    deferred,
    let_sleep,
    on_purpose,
    turned_away,
)
from check_vllm.machine import clock
from check_vllm.server import held
from check_vllm.server.calls import Calls
from check_vllm.server.fetch import Endpoint


class Step(NamedTuple):
    """What every step of one observation shares, fixed for its length: the calls against its deadline, the
    judge's settings, check_vllm_restart's marker, how to wait, whether the caller allows a probe now."""

    calls: Calls
    settings: Settings
    marker: Instant | None
    sleep: Callable[[float], None]
    may_probe: Callable[[], bool]


class Observation(NamedTuple):
    verdict: Verdict
    #: The newest good /metrics reading of the observation (None when there was none), for charts.
    reading: Reading | None = None


def observe(
    client: httpx.Client, endpoint: Endpoint, memory: Memory, settings: Settings, options: Options, *,
    deadline: float = math.inf, marker: Instant | None = None, now: Callable[[], Instant | float] = clock.now,
    sleep: Callable[[float], None] = time.sleep, doing: Callable[[str], None] = lambda what: None,
    may_probe: Callable[[], bool] = lambda: True,
) -> Observation:
    """One full observation; `deadline` is on the monotonic clock.

    `may_probe` is asked only when the verdict wants a probe and `options.probe` allows one: the Netdata
    collector uses it to probe an idle server at most once per probe_every.
    """
    known = memory.baseline.reading.engine if memory.baseline is not None else None
    calls = Calls(client, endpoint, options, deadline, doing, now, memory.whole_page, known)
    seen = _sequence(Step(calls, settings, marker, sleep, may_probe), memory)
    if seen.verdict.memory.whole_page == calls.whole_page:
        return seen
    # the judge hands on the memory it was given: which page this server serves is known only here
    carried = seen.verdict.memory._replace(whole_page=calls.whole_page)
    return seen._replace(verdict=seen.verdict._replace(memory=carried))


def _witness(calls: Calls, failure: Failure) -> Witness | None:
    """What the host sees of the server's process."""
    from check_vllm.server import host

    calls.doing("the server's process (the host's witness)")
    return host.witness(calls.endpoint.url, calls.options, failure.status)


def _engine_said(calls: Calls, failure: Failure) -> Failure:
    """A read answered with a 5xx: its API server may say the engine died (GET /health, on this path only; a
    time-out is an event loop too busy to tell, and is not asked again)."""
    if failure.kind == UNRESPONSIVE and failure.status is not None and not failure.dead_engine \
            and calls.engine_dead():
        return Failure(DOWN, f"{failure.detail}; GET /health answered 503", dead_engine=True)
    return failure


def _judged(step: Step, memory: Memory, failure: Failure, second_look: bool) -> Verdict:
    """The evidence of a run without a reading, gathered once, and its one judge (imported here: a run that got
    its reading never loads it)."""
    from check_vllm.judge.no_reading import assess_failure, host_may_explain

    calls = step.calls
    failure = _engine_said(calls, failure)
    witness = _witness(calls, failure) if host_may_explain(failure) else None
    process = witness.process if witness is not None else None
    # only for silence (a time-out): a loading llama-server answers 503 "Loading model", and a proxy that answers
    # /health itself must not make that read as loaded
    loaded = process is not None and failure.status is None and calls.says_loaded(process.engine)
    return assess_failure(memory, Evidence(failure, witness, step.marker, second_look, loaded), step.settings,
                          calls.now())


def _second_look_due(calls: Calls, sleep: Callable[[float], None]) -> bool:
    """Wait for the second look the judge asked for, when the caller allows waiting (Options.reread) and the
    deadline leaves room for it and a reading after it."""
    pause = calls.options.look_again
    if not calls.options.reread or time.monotonic() + pause + 1.0 >= calls.deadline:
        return False
    calls.doing(f"{pause:g} s before a second look")
    sleep(pause)
    return True


def _without_reading(step: Step, memory: Memory, failure: Failure) -> tuple[Verdict, Reading | None]:
    """The one door for every read or probe that gave no reading: judged on its evidence, and looked at again
    when the judge asks (LOOK_AGAIN) and there is room; a caller that cannot wait leaves the second look to its
    next run (the memory says a first look was taken). A second look that finds the server serving is judged as
    the reading it is, and that reading comes with the verdict."""
    verdict = _judged(step, memory, failure, False)
    if verdict.action != LOOK_AGAIN:
        return verdict, None
    if not _second_look_due(step.calls, step.sleep):
        return verdict._replace(action=None), None
    again = step.calls.metrics()
    if isinstance(again, Reading):
        return assess(memory, again, step.settings, step.calls.now()), again
    return _judged(step, memory, again, True), None


#: How a probe's outcome is judged: (verdict, outcome, re-read or None, settings, now) -> Verdict.
ProbeJudge = Callable[[Verdict, ProbeOutcome, "Reading | None", Settings, Instant], Verdict]


def _probed(step: Step, verdict: Verdict, got: Reading, fair: float,
            judge: ProbeJudge | None = None) -> tuple[Verdict, Reading]:
    """The probe, and the reading an unanswered one needs (the judge's CONFIRM), judged once: by `judge` (the
    idle probe's after_probe unless given). A probe turned away as paused is the engine's own word, whoever
    asked for it."""
    from check_vllm.judge.idle_completion import after_probe, needs_reading, probe_failure  # only an idle engine's run

    calls, settings = step.calls, step.settings
    outcome = calls.probe(calls.options.model or got.model)
    if outcome.kind == ENGINE_PAUSED:
        checkpoint, route = None, calls.engine.routes.checkpoint
        if route and asks_checkpoint(verdict.memory, got):
            calls.doing(f"GET {route}")
            checkpoint = held.checkpoint(calls.client, calls.endpoint, route, calls.left(None))
        return turned_away(verdict, got, outcome, checkpoint, settings, calls.now()), got
    failure = probe_failure(outcome)
    reread: Reading | Failure | None = None
    if failure is None and needs_reading(outcome):
        if time.monotonic() + fair >= calls.deadline:  # no fair re-read left: no proof
            outcome = outcome._replace(kind=CUT_SHORT)
        else:
            reread = calls.metrics()
            failure = reread if isinstance(reread, Failure) else None
    if failure is not None:
        settled, serving = _without_reading(step, verdict.memory, failure)
        failed_too = f"; the probe failed too: {outcome.detail}" if reread is not None else ""
        return settled._replace(text=settled.text + failed_too), serving or got
    if isinstance(reread, Reading):
        got = reread
    return (judge or after_probe)(verdict, outcome, reread if isinstance(reread, Reading) else None, settings,
                                  instant(calls.now())), got


def _sequence(step: Step, memory: Memory) -> Observation:
    """Read, judge, and read again or probe as the verdict asks."""
    calls, settings = step.calls, step.settings
    options, deadline, now = calls.options, calls.deadline, calls.now
    if options.proxy:
        return Observation(_judged(step, memory, calls.liveness(PROXY, ""), False))

    started = time.monotonic()
    first = calls.metrics()
    if isinstance(first, Reading):
        got: Reading | None = first
        verdict = assess(memory, first, settings, now())
    else:
        verdict, got = _without_reading(step, memory, first)
    if got is None:
        return Observation(verdict)
    # A second read is fair only with at least the time the first one took: cut shorter by -t, a slow
    # server's late answer would read as no answer.
    fair = time.monotonic() - started + 1.0

    pause = max(options.reread_delay, settings.min_gap)  # a shorter gap would prove nothing
    if verdict.action == REREAD and options.reread and time.monotonic() + pause + fair < deadline:
        calls.doing(f"{pause:g} s between two readings")
        step.sleep(pause)
        again = calls.metrics()
        if isinstance(again, Failure):
            verdict, serving = _without_reading(step, verdict.memory, again)
            if serving is None:
                return Observation(verdict, got)
            got = serving
        else:
            got, verdict = again, assess(verdict.memory, again, settings, now())

    if verdict.action == PROBE and options.probe and step.may_probe():
        verdict = _let_sleep(calls, verdict)
        if verdict.action == PROBE:
            verdict, got = _probed(step, verdict, got, fair)
    if not concerns(verdict):
        return Observation(verdict, got)
    verdict = _explained(calls, verdict, got, settings)
    if verdict.action != PROBE_DEFERRED:
        return Observation(verdict, got)
    seen = got  # a stall whose waiting work is all deferred: the probe tells a wait from a hang

    def judge(v: Verdict, outcome: ProbeOutcome, reread: Reading | None, s: Settings, at: Instant) -> Verdict:
        return deferred(v, seen, outcome, reread, s, at)

    if options.probe and step.may_probe():
        return Observation(*_probed(step, verdict, got, fair, judge))
    return Observation(deferred(verdict, got, None, None, settings, now()), got)


def _let_sleep(calls: Calls, verdict: Verdict) -> Verdict:
    """Before an idle probe of a server that sleeps when idle: its own word (a cached route, no task), else its
    command line on this host; either spares it the probe (check_vllm.judge.quiet.let_sleep)."""
    row = calls.engine
    said = held.asleep(calls.client, calls.endpoint, row.routes.asleep, calls.left(None)) if row.routes.asleep else None
    if said or not row.sleep_flag:
        return let_sleep(verdict, said, None, calls.now())
    from check_vllm.server import host

    return let_sleep(verdict, said, host.idle_sleep(calls.endpoint.url, calls.options), calls.now())


def _explained(calls: Calls, verdict: Verdict, got: Reading, settings: Settings) -> Verdict:
    """A stall its server may explain (paused on purpose, a faulted engine held for recovery, deferred work):
    GET /is_paused and the fault-tolerance status are asked on this path only, where the judge says they may
    tell, and only of an engine whose server has them."""
    said = faults = None
    routes = calls.engine.routes
    if routes.paused and asks_server(verdict, got):
        calls.doing(f"GET {routes.paused}")
        said = held.is_paused(calls.client, calls.endpoint, routes, calls.left(None))
    if routes.faults and asks_faults(verdict, got):
        calls.doing("GET the fault-tolerance status")
        faults = held.faults(calls.client, calls.endpoint, routes.faults, calls.left(None))
    return on_purpose(verdict, got, said, settings, calls.now(), faults)
