"""One observation of a server: read /metrics, judge, and only if the verdict asks, read again or probe.

Shared by the check (one call per run) and the Netdata collector (one call per tick). This module
only sequences calls against the deadline: what to do next is the verdict's `action`, decided by the
judge; each request gets a timeout cut to what is left of the caller's deadline, so a slow server
earns a specific verdict ("unresponsive") instead of the caller's blunt time-out.

Each read asks for the restricted /metrics page (check_vllm.server.api). A server whose restricted page fails
where the whole page works is read by the whole page from then on (the memory says since when; the
run that found out re-reads at once and loses nothing), and asked the restricted page again after
RESTRICTED_RETRY: a server may be upgraded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import httpx

from check_vllm.contract.values import (
    CUT_SHORT,
    REFUSED,
    REJECTED,
    Failure,
    Instant,
    Memory,
    ProbeOutcome,
    Reading,
    Verdict,
    Witness,
)
from check_vllm.contract.vocab import (
    DOWN,
    NO_METRICS,
    PROBE,
    PROXY,
    REREAD,
    RUN_TIMEOUT,
    UNRESPONSIVE,
    Options,
    Settings,
)
from check_vllm.judge.assess import assess
from check_vllm.judge.proof import elapsed, instant
from check_vllm.server import api, clock
from check_vllm.server.fetch import Endpoint, FetchError


class Observation(NamedTuple):
    verdict: Verdict
    #: The newest good /metrics reading of the observation (None when there was none), for charts.
    reading: Reading | None = None


#: Seconds a server that failed the restricted read is read by its whole page before it is asked again.
RESTRICTED_RETRY = 3600.0


class _Calls:
    """The server's calls, each with its timeout cut to the deadline; which /metrics page to ask for."""

    def __init__(self, client: httpx.Client, endpoint: Endpoint, options: Options, deadline: float,
                 doing: Callable[[str], None], now: Callable[[], Instant | float], whole_page: Instant | None) -> None:
        self.client, self.endpoint, self.options, self.deadline = client, endpoint, options, deadline
        self.doing, self.now = doing, now
        #: Since when this server is read by its whole page (None: the restricted one); the memory carries it.
        self.whole_page = whole_page

    def left(self, cap: float | None) -> float:
        """A request's timeout: its cap, never beyond the deadline (no cap: what the deadline leaves)."""
        room = self.deadline - time.monotonic()
        if cap is None:
            cap = room if math.isfinite(room) else RUN_TIMEOUT
        return max(min(cap, room), 0.1)

    def _restricted(self) -> bool:
        """Ask for the restricted page: always, unless it failed here less than RESTRICTED_RETRY ago."""
        if self.whole_page is None:
            return True
        since = elapsed(self.whole_page, instant(self.now()))
        return since is None or not 0 <= since < RESTRICTED_RETRY  # another boot or a clock step: ask again

    def metrics(self) -> Reading | Failure:
        """Every read of a run alike: a page that is not vLLM's is followed by /v1/models for liveness."""
        self.doing("GET /metrics")
        got: Reading | Failure | None = None
        asked = self._restricted()
        if asked:
            restricted = api.read_restricted(self.client, self.endpoint, self.left(self.options.metrics_timeout))
            got = restricted.got
            if isinstance(got, Reading):  # the restricted page works (again); a redirect got us the whole page
                self.whole_page = None if restricted.as_asked else instant(self.now())
        if got is None:
            got = api.read_metrics(self.client, self.endpoint, self.left(self.options.metrics_timeout))
            if asked and isinstance(got, Reading):  # the URL was at fault, not the server: the whole page from now on
                self.whole_page = instant(self.now())
        if isinstance(got, Failure) and got.kind == NO_METRICS:
            return self.liveness(NO_METRICS, got.detail)
        return got

    def liveness(self, kind: str, detail: str) -> Failure:
        self.doing("GET /v1/models")
        return api.liveness(self.client, self.endpoint, kind, detail, self.left(self.options.metrics_timeout))

    def probe(self, model: str | None) -> ProbeOutcome:
        if not model:
            self.doing("GET /v1/models")
            try:
                model = api.first_model(self.client, self.endpoint, self.left(self.options.metrics_timeout))
            except FetchError as err:
                return ProbeOutcome(REJECTED, 0.0, f"no model to probe: {err.detail}")
        self.doing(f"the probe (POST /v1/completions, up to {self.options.probe_timeout:g} s)")
        budget = self.left(self.options.probe_timeout)
        return api.complete(self.client, self.endpoint, model or "", budget, budget >= self.options.probe_timeout)


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
    calls = _Calls(client, endpoint, options, deadline, doing, now, memory.whole_page)
    seen = _sequence(calls, memory, settings, marker, sleep, may_probe)
    if seen.verdict.memory.whole_page == calls.whole_page:
        return seen
    # the judge hands on the memory it was given: which page this server serves is known only here
    carried = seen.verdict.memory._replace(whole_page=calls.whole_page)
    return seen._replace(verdict=seen.verdict._replace(memory=carried))


def _silence(calls: _Calls, memory: Memory, failure: Failure, settings: Settings, marker: Instant | None = None,
             second_look: bool = False) -> Verdict:
    """A run without a reading, judged (imported here: a run that got its reading never loads that judge);
    the host is asked for the server's process only then, and only when it could be a witness."""
    from check_vllm.judge.silence import assess_failure

    return assess_failure(memory, failure, settings, calls.now(), marker, _witness(calls, failure.kind), second_look)


def _witness(calls: _Calls, kind: str) -> Witness | None:
    """What the host sees of the server's process, asked only for a failure it can explain."""
    if kind not in (DOWN, UNRESPONSIVE, NO_METRICS):
        return None
    from check_vllm.server import host

    calls.doing("looking for the server's process")
    return host.witness(calls.endpoint.url, calls.options.pid_file, calls.options.pid_command)


def _second_look_due(calls: _Calls, sleep: Callable[[float], None]) -> bool:
    """Wait for the second look the judge asked for (nothing listens and no process right after the server
    was up), when the deadline leaves room for it and a reading after it."""
    pause = calls.options.look_again
    if time.monotonic() + pause + 1.0 >= calls.deadline:
        return False
    calls.doing(f"{pause:g} s before a second look")
    sleep(pause)
    return True


def _probed(calls: _Calls, verdict: Verdict, got: Reading, settings: Settings, marker: Instant | None,
            sleep: Callable[[float], None], fair: float) -> tuple[Verdict, Reading]:
    """The idle probe, and the reading it may need; a server gone after it gets the second look too."""
    from check_vllm.judge.probe import after_probe  # only an idle engine's run gets here

    now = calls.now
    outcome = calls.probe(calls.options.model or got.model)
    refused = outcome.kind == REFUSED  # the probe was the second look: its reading saw the server up
    probed = after_probe(verdict, outcome, None, settings, now(), _witness(calls, DOWN) if refused else None,
                         marker, refused)
    if probed.action == REREAD and time.monotonic() + fair >= calls.deadline:  # no fair re-read left: no proof
        probed = after_probe(verdict, outcome._replace(kind=CUT_SHORT), None, settings, now())

    def reread(second_look: bool) -> Verdict:
        nonlocal got
        again = calls.metrics()
        if isinstance(again, Reading):
            got = again
            return after_probe(verdict, outcome, again, settings, now(), None, marker, second_look)
        return after_probe(verdict, outcome, again, settings, now(), _witness(calls, again.kind), marker, second_look)

    if probed.action == REREAD:
        probed = reread(False)
        if probed.action == REREAD and _second_look_due(calls, sleep):
            probed = reread(True)
    return probed, got


def _first_reading(calls: _Calls, memory: Memory, settings: Settings, marker: Instant | None,
                   sleep: Callable[[float], None]) -> Reading | Verdict:
    """The run's first reading, or its verdict without one. A server that refused with no process here
    right after it was up gets a second look (the judge asks): a restart may be between its stop and start."""
    got = calls.metrics()
    if isinstance(got, Reading):
        return got
    verdict = _silence(calls, memory, got, settings, marker)
    if verdict.action != REREAD or not _second_look_due(calls, sleep):
        return verdict
    again = calls.metrics()
    return again if isinstance(again, Reading) else _silence(calls, memory, again, settings, marker, True)


def _sequence(calls: _Calls, memory: Memory, settings: Settings, marker: Instant | None,
              sleep: Callable[[float], None], may_probe: Callable[[], bool]) -> Observation:
    """Read, judge, and read again or probe as the verdict asks."""
    options, deadline, now = calls.options, calls.deadline, calls.now
    if options.proxy:
        return Observation(_silence(calls, memory, calls.liveness(PROXY, ""), settings))

    started = time.monotonic()
    got = _first_reading(calls, memory, settings, marker, sleep)
    if isinstance(got, Verdict):
        return Observation(got)
    verdict = assess(memory, got, settings, now())
    # A second read is fair only with at least the time the first one took: cut shorter by -t, a slow
    # server's late answer would read as no answer.
    fair = time.monotonic() - started + 1.0

    pause = max(options.reread_delay, settings.min_gap)  # a shorter gap would prove nothing
    if verdict.action == REREAD and options.reread and time.monotonic() + pause + fair < deadline:
        calls.doing(f"{pause:g} s between two readings")
        sleep(pause)
        again = calls.metrics()
        if isinstance(again, Failure):
            return Observation(_silence(calls, verdict.memory, again, settings, marker), got)
        got, verdict = again, assess(verdict.memory, again, settings, now())

    if verdict.action == PROBE and options.probe and may_probe():
        verdict, got = _probed(calls, verdict, got, settings, marker, sleep, fair)
    return Observation(verdict, got)
