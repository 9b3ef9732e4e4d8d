"""The whole ``/metrics`` page: vLLM's families, the API server's HTTP series and the process/runtime series.

The simulator takes one consistent snapshot under its lock (a ``PageView``) and this module turns it into
prometheus_client families; ``metrics_text()`` runs them through ``generate_latest`` like vLLM does.
``restricted`` is what prometheus_client's own app (mounted by vLLM at ``/metrics/``) serves for
``?name[]=...``: only the samples of those names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from .vllm_families import EngineView, cumulative_profile, vllm_families

_HTTP_HIGHR_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0,
    30.0, 60.0,
)
_HTTP_BUCKETS: Final[tuple[float, ...]] = (0.1, 0.5, 1.0)

#: http_requests_total key (handler, method, status class) -> (count, wall-clock time of the first one).
HttpCounts = Mapping[tuple[str, str, str], tuple[float, float]]


@dataclass(frozen=True)
class PageView:
    """Everything one scrape shows; ``multiprocess`` drops process_* and ``_created`` as that mode does."""

    model: str
    legacy: bool
    multiprocess: bool
    start_time: float
    engines: Sequence[EngineView]
    http_counts: HttpCounts


def render(view: PageView) -> list[Metric]:
    """Every family of the page, in the order vLLM's page has them."""
    created = None if view.multiprocess else view.start_time
    families = vllm_families(view.model, view.legacy, view.engines, created)
    families.extend(_http_families(view.http_counts, view.multiprocess))
    if not view.multiprocess:
        families.extend(_runtime_families(view.start_time))
    return families


def restricted(source: Collector, names: Iterable[str]) -> Collector:
    """``source`` as prometheus_client's ``RestrictedRegistry`` serves it: only samples named in ``names`` (by
    sample name: ``_total``, ``_count``, ``_created`` alike), families left without a sample dropped."""
    return _Restricted(source, frozenset(names))


class _Restricted:
    def __init__(self, source: Collector, names: frozenset[str]) -> None:
        self._source = source
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            samples = [sample for sample in family.samples if sample.name in self._names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


def registry_for(snapshot: Callable[[], list[Metric]]) -> CollectorRegistry:
    """A registry holding only a collector that asks ``snapshot`` for the families on every scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(snapshot))
    return registry


class _Collector:
    """prometheus_client collector that asks the simulator for a consistent snapshot on every scrape."""

    def __init__(self, render: Callable[[], list[Metric]]) -> None:
        self._render = render

    def collect(self) -> Iterable[Metric]:
        return self._render()

    def describe(self) -> Iterable[Metric]:
        """Declare no names: the family set changes with the variant, and the registry holds only us."""
        return []


def _http_families(counts: HttpCounts, multiprocess: bool) -> list[Metric]:
    """fastapi-instrumentator style series, as vLLM's API server exposes them."""
    requests = CounterMetricFamily(
        "http_requests", "Total number of requests by method, status and handler.",
        labels=["handler", "method", "status"],
    )
    highr = HistogramMetricFamily(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
    )
    duration = HistogramMetricFamily(
        "http_request_duration_seconds",
        "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
        labels=["handler", "method"],
    )
    request_size = SummaryMetricFamily(
        "http_request_size_bytes", "Content length of incoming requests by handler. Only value of header "
        "is respected. Otherwise ignored. No percentile calculated. ", labels=["handler"],
    )
    response_size = SummaryMetricFamily(
        "http_response_size_bytes", "Content length of outgoing responses by handler. Only value of "
        "header is respected. Otherwise ignored. No percentile calculated. ", labels=["handler"],
    )
    total = 0.0
    per_handler: dict[tuple[str, str], float] = {}
    for (handler, method, status), (count, created) in sorted(counts.items()):
        requests.add_metric([handler, method, status], count, created=None if multiprocess else created)
        total += count
        per_handler[(handler, method)] = per_handler.get((handler, method), 0.0) + count
    highr.add_metric([], cumulative_profile(total, _HTTP_HIGHR_BUCKETS), total * 0.01)
    handlers: dict[str, float] = {}
    for (handler, method), count in sorted(per_handler.items()):
        duration.add_metric([handler, method], cumulative_profile(count, _HTTP_BUCKETS), count * 0.01)
        handlers[handler] = handlers.get(handler, 0.0) + count
    for handler, count in sorted(handlers.items()):
        request_size.add_metric([handler], int(count), count * 64.0)
        response_size.add_metric([handler], int(count), count * 2048.0)
    return [requests, highr, duration, request_size, response_size]


def _runtime_families(start_time: float) -> list[Metric]:
    """python_gc_*, python_info and process_* as prometheus_client's default collectors print them."""
    collected = CounterMetricFamily(
        "python_gc_objects_collected", "Objects collected during gc", labels=["generation"]
    )
    uncollectable = CounterMetricFamily(
        "python_gc_objects_uncollectable", "Uncollectable objects found during GC", labels=["generation"]
    )
    collections = CounterMetricFamily(
        "python_gc_collections", "Number of times this generation was collected", labels=["generation"]
    )
    for generation, (objects, runs) in enumerate(((12345.0, 1234.0), (2345.0, 112.0), (345.0, 10.0))):
        collected.add_metric([str(generation)], objects)
        uncollectable.add_metric([str(generation)], 0.0)
        collections.add_metric([str(generation)], runs)
    info = GaugeMetricFamily(
        "python_info", "Python platform information",
        labels=["implementation", "major", "minor", "patchlevel", "version"],
    )
    info.add_metric(["CPython", "3", "12", "3", "3.12.3"], 1.0)
    uptime = max(0.0, time.time() - start_time)
    process = [
        GaugeMetricFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", 3.2e10),
        GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.", 2.1e9),
        GaugeMetricFamily(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", start_time
        ),
        CounterMetricFamily(
            "process_cpu_seconds", "Total user and system CPU time spent in seconds.", uptime * 0.1
        ),
        GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", 96.0),
        GaugeMetricFamily("process_max_fds", "Maximum number of open file descriptors.", 1048576.0),
    ]
    return [collected, uncollectable, collections, info, *process]


def gzip_accepted(accept_encoding: str) -> bool:
    """prometheus_client's rule: gzip when any listed coding is gzip, whatever its q-value."""
    return any(coding.split(";")[0].strip().lower() == "gzip" for coding in accept_encoding.split(","))
