"""One observation of a server: read /metrics, judge, and only if the verdict asks, read again or probe.

Shared by the check (one call per run) and the Netdata plugin (one call per tick). Each request gets
a timeout cut to what is left of the caller's deadline, so a slow server earns a specific verdict
("unresponsive") instead of the caller's blunt time-out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import httpx

from . import probe as probes
from .fetch import Endpoint, FetchError, request
from .reading import NotMetrics, Reading, parse
from .verdict import Failure, Probe, Settings, Verdict, after_probe, assess, assess_failure


class Options(NamedTuple):
    proxy: bool = False
    probe: bool = True
    model: str | None = None
    probe_timeout: float = 10.0
    metrics_timeout: float = 10.0
    #: With no usable previous reading and work present, read again this much later.
    reread_delay: float = 3.0
    #: False where the caller reads again soon anyway (the Netdata plugin's next tick).
    reread: bool = True


def read_metrics(client: httpx.Client, endpoint: Endpoint, timeout: float) -> Reading | Failure:
    """GET /metrics once: a Reading, or the Failure that explains why there is none."""
    try:
        resp = request(client, endpoint, "GET", "/metrics", timeout)
    except FetchError as err:
        if err.kind == "down":
            return Failure("down", f"{err.detail} ({endpoint.url})")
        if err.kind in ("too large", "redirect", "encoding"):  # the page is not where we were told: no metrics
            return Failure("no metrics", err.detail)
        return Failure("unresponsive", err.detail)
    if resp.status >= 500:
        return Failure("unresponsive", f"/metrics answered HTTP {resp.status}")
    if resp.status != 200:
        return Failure("no metrics", f"/metrics answered HTTP {resp.status}")
    try:
        return parse(resp.text())
    except NotMetrics as err:
        kind = resp.content_type.split(";")[0].strip() or "no content type"
        return Failure("no metrics", f"/metrics is not vLLM's ({err}; {kind}, {len(resp.body)} bytes)")


def models(client: httpx.Client, endpoint: Endpoint, kind: str, detail: str, timeout: float) -> Failure:
    """Liveness from /v1/models alone, for when /metrics cannot tell (or must not be read)."""
    try:
        model = probes.first_model(client, endpoint, timeout)
    except FetchError as err:
        why = f"{err.detail} ({endpoint.url})" if err.kind == "down" else err.detail
        return Failure(kind, detail or why, models_ok=False)
    return Failure(kind, detail, models_ok=True, model=model)


class Observation(NamedTuple):
    verdict: Verdict
    #: The newest good /metrics reading of the observation (None when there was none), for charts.
    reading: Reading | None = None


def observe(
    client: httpx.Client, endpoint: Endpoint, state: dict[str, Any], settings: Settings, options: Options, *,
    deadline: float = math.inf, marker: float | None = None, now: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep, doing: Callable[[str], None] = lambda what: None,
    may_probe: Callable[[], bool] = lambda: True,
) -> Observation:
    """One full observation; `deadline` is on the monotonic clock.

    `may_probe` is asked only when the verdict wants a probe and `options.probe` allows one: the Netdata
    plugin uses it to probe an idle server at most once per probe_every.
    """

    def left(cap: float) -> float:
        return max(min(cap, deadline - time.monotonic()), 0.1)

    def metrics() -> Reading | Failure:
        doing("GET /metrics")
        return read_metrics(client, endpoint, left(options.metrics_timeout))

    if options.proxy:
        doing("GET /v1/models")
        return Observation(assess_failure(
            state, models(client, endpoint, "proxy", "", left(options.metrics_timeout)), settings, now()))

    got = metrics()
    if isinstance(got, Failure):
        if got.kind == "no metrics":
            doing("GET /v1/models")
            got = models(client, endpoint, "no metrics", got.detail, left(options.metrics_timeout))
        return Observation(assess_failure(state, got, settings, now(), marker))
    verdict = assess(state, got, settings, now())

    pause = max(options.reread_delay, settings.min_gap)  # a shorter gap would prove nothing
    if verdict.action == "reread" and options.reread and time.monotonic() + pause + 1 < deadline:
        doing(f"{pause:g} s between two readings")
        sleep(pause)
        again = metrics()
        if isinstance(again, Failure):
            return Observation(assess_failure(verdict.new_state, again, settings, now(), marker), got)
        got, verdict = again, assess(verdict.new_state, again, settings, now())

    if verdict.action == "probe" and options.probe and may_probe():
        model = options.model or got.model
        if not model:
            doing("GET /v1/models")
            try:
                model = probes.first_model(client, endpoint, left(options.metrics_timeout))
            except FetchError as err:
                return Observation(after_probe(
                    verdict, Probe(False, 0.0, f"no model to probe: {err.detail}", status=400), None, settings, now()),
                    got)
        doing(f"the probe (POST /v1/completions, up to {options.probe_timeout:g} s)")
        budget = left(options.probe_timeout)
        result = probes.complete(client, endpoint, model or "", budget)
        if budget < options.probe_timeout:
            result = result._replace(cut_short=True)
        reread: Reading | Failure | None = None
        if not result.ok and not result.refused and not (result.status and 400 <= result.status < 500):
            reread = metrics()
        verdict = after_probe(verdict, result, reread, settings, now())
        if isinstance(reread, Reading):
            got = reread
    return Observation(verdict, got)
