"""The whole SGLang ``/metrics`` page: the tokenizer's request families, the HTTP middleware's, the CPU monitors',
then each scheduler's (``sglang_families``).

The tokenizer process counts a request only when it finishes (``observe_one_finished_request``) and has no DP label:
one series for the whole server, whichever engine ran the request. Its ``is_streaming`` label is "false" for every
request the simulator serves. The HTTP series count every request, the page's own scrape included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client.core import Metric

from .sglang_engine import SglangEngine
from .sglang_families import add_scheduler, scheduler_labels
from .sglang_series import Page, series

_TTFT_BUCKETS: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
_E2E_BUCKETS: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
                       2400)
_ITL_BUCKETS: Final = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                       0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
_PROMPT_BUCKETS: Final = (100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
                          12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000,
                          100000, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000)
#: TokenizerMetricsCollector.emit_startup_time's phases, set once when the server has started.
_STARTUP: Final = (("load_weight", 4.8), ("kv_cache_allocation", 0.6), ("scheduler_e2e", 9.3), ("tokenizer_e2e", 2.1))
#: start_cpu_monitor_thread: first increment after its 5 s sleep.
CPU_MONITOR_SECONDS: Final = 5.0

#: (endpoint, method, status code; "" for sglang:http_requests_total) -> count.
HttpTally = Mapping[tuple[str, str, str], int]


@dataclass(frozen=True)
class SglangView:
    """One scrape: the schedulers, the HTTP tallies, the server's age and the schedulers' pids."""

    model: str
    engines: Sequence[SglangEngine]
    http: HttpTally
    active: Mapping[tuple[str, str], int]
    uptime: float
    pids: Sequence[int]


def render(view: SglangView) -> list[Metric]:
    """Every family of the page, tokenizer process first, then the schedulers in DP rank order."""
    page = Page()
    base = {"model_name": view.model, "engine_type": "unified"}
    for phase, seconds in _STARTUP:
        page.gauge("sglang:startup_time_seconds", "Engine startup duration by phase in seconds.",
                   series(base, phase=phase), seconds)
    _requests(page, base, view.engines)
    _http(page, view.http, view.active)
    if view.uptime >= CPU_MONITOR_SECONDS:
        for component in ("tokenizer", "detokenizer"):
            page.counter("sglang:process_cpu_seconds_total", "Total CPU time consumed by this process (user + system)",
                         {"component": component}, round(0.01 * int(view.uptime / CPU_MONITOR_SECONDS) * 5, 2))
    for index, engine in enumerate(view.engines):
        add_scheduler(page, engine, scheduler_labels(view.model, index, len(view.engines)), view.pids[index])
    return page.metrics()


def _requests(page: Page, base: Mapping[str, str], engines: Sequence[SglangEngine]) -> None:
    """observe_one_finished_request (plus TTFT, observed with a non-streamed request's one and only output)."""
    count = sum(e.requests for e in engines)
    if count == 0:
        return  # no child made yet: in multiprocess mode the families are not on the page at all
    prompt = sum(e.request_prompt for e in engines)
    generation = sum(e.request_generation for e in engines)
    stream = series(base, is_streaming="false")
    page.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", stream, prompt)
    page.counter("sglang:generation_tokens_total", "Number of generation tokens processed.", stream, generation)
    page.histogram("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", base, _PROMPT_BUCKETS,
                   count, prompt)
    page.histogram("sglang:uncached_prompt_tokens_histogram", "Histogram of uncached (compute) prompt token length.",
                   base, _PROMPT_BUCKETS, count, prompt)
    page.histogram("sglang:generation_tokens_histogram", "Histogram of generation token length.", base,
                   _PROMPT_BUCKETS, count, generation)
    page.counter("sglang:num_requests_total", "Number of requests processed.", stream, count)
    page.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", stream,
                   _TTFT_BUCKETS, count, round(0.05 * count, 6))
    page.histogram("sglang:request_time_per_output_token_seconds",
                   "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                   stream, _ITL_BUCKETS, count, round(0.02 * count, 6))
    page.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                   stream, _E2E_BUCKETS, count, round(0.02 * generation + 0.05 * count, 6))


def _http(page: Page, tally: HttpTally, active: Mapping[tuple[str, str], int]) -> None:
    """The middleware's series: a request is counted when it arrives, its response when it is sent."""
    for (endpoint, method, status), count in tally.items():
        if status == "":
            page.counter("sglang:http_requests_total", "Total number of HTTP requests by endpoint and method",
                         {"endpoint": endpoint, "method": method}, count)
    for (endpoint, method, status), count in tally.items():
        if status != "":
            page.counter("sglang:http_responses_total", "Total number of HTTP responses by endpoint and status code",
                         {"endpoint": endpoint, "method": method, "status_code": status}, count)
    for (endpoint, method), count in active.items():  # livesum: no pid, one series per endpoint ever seen
        page.gauge("sglang:http_requests_active", "Number of currently active HTTP requests",
                   {"endpoint": endpoint, "method": method}, count)
