"""The ``vllm:*`` metric families, with vLLM's names, help texts, labels and bucket layouts.

Rendered by prometheus_client, the library the check parses with, so the page is what vLLM would serve. The
filler histograms carry no signal the check uses; they make the page as large and varied as a real one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from .engine import FINISHED_REASONS, ITERATION_TOKENS_BUCKETS, EngineCounters

# --- bucket layouts (as in vLLM's metrics.py) ----------------------------------------------------------------
_TTFT_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)
_ITL_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)
_TOKEN_COUNT_BUCKETS: Final[tuple[float, ...]] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
_PARAMS_N_BUCKETS: Final[tuple[float, ...]] = (1, 2, 5, 10, 20)

SLEEP_STATES: Final[tuple[str, ...]] = ("awake", "weights_offloaded", "discard_all")

#: Filler histograms: (name, help, buckets, what the sum follows, mean value per finished request).
#: Their counts follow the finished-request counter so the page stays self-consistent and realistic in size.
_FILLER_HISTOGRAMS: Final[tuple[tuple[str, str, tuple[float, ...], str, float], ...]] = (
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT_BUCKETS,
     "finished", 0.12),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _ITL_BUCKETS,
     "finished", 0.04),
    ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", _ITL_BUCKETS,
     "finished", 0.04),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", _LATENCY_BUCKETS,
     "finished", 4.2),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
     _LATENCY_BUCKETS, "finished", 0.8),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
     _LATENCY_BUCKETS, "finished", 3.4),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
     _LATENCY_BUCKETS, "finished", 0.3),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
     _LATENCY_BUCKETS, "finished", 3.1),
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKEN_COUNT_BUCKETS, "prompt", 0.0),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKEN_COUNT_BUCKETS,
     "generation", 0.0),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
     _TOKEN_COUNT_BUCKETS, "generation", 0.0),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", _TOKEN_COUNT_BUCKETS,
     "generation", 0.0),
    ("vllm:request_params_n", "Histogram of the n request parameter.", _PARAMS_N_BUCKETS, "finished", 1.0),
)


@dataclass(frozen=True)
class EngineView:
    """What one engine shows on this scrape: its counters plus the gauges the scenario and queue decide."""

    counters: EngineCounters
    running: int
    waiting: int
    asleep: bool
    #: Waiting requests deferred on a KV transfer (vllm:num_requests_waiting_by_reason reason="deferred").
    deferred: int = 0


def cumulative_profile(count: float, buckets: Sequence[float]) -> list[tuple[str, float]]:
    """Spread ``count`` observations over ``buckets`` (cumulative, +Inf last) with a fixed, plausible shape.

    The first third of the buckets stays empty and each later bucket halves the remainder; the exact shape is
    irrelevant to the check, it only has to be monotonic and end at ``count``.
    """
    start = len(buckets) // 3
    rows: list[tuple[str, float]] = []
    for i, upper in enumerate(buckets):
        fraction = 0.0 if i < start else 1.0 - 0.5 ** (i - start + 1)
        rows.append((floatToGoString(upper), count * fraction))
    rows.append(("+Inf", count))
    return rows


def _add_created(family: Metric, values: list[str], names: list[str], created: float | None) -> None:
    """Append a ``_created`` sample to a histogram series, as prometheus_client's Histogram does."""
    if created is not None:
        family.samples.append(Sample(family.name + "_created", dict(zip(names, values, strict=True)), created))


def vllm_families(model: str, legacy: bool, engines: Sequence[EngineView], created: float | None) -> list[Metric]:
    """Every ``vllm:*`` family, one series per engine; ``created`` None leaves out the ``_created`` samples."""
    page = _VllmPage(legacy)
    for index, view in enumerate(engines):
        page.add_engine(page.label_values(model, index), view, created)
    return page.families(model)


class _VllmPage:
    """The families of one scrape, filled engine by engine; V0 (legacy) pages have no engine label."""

    def __init__(self, legacy: bool) -> None:
        self.legacy = legacy
        self.names = ["model_name"] if legacy else ["engine", "model_name"]
        names = self.names
        self.running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels=names)
        self.waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=names)
        self.by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason. Reason labels: "
            "'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints "
            "(LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            labels=[*names, "reason"])
        if legacy:
            self.kv = GaugeMetricFamily(
                "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", labels=names)
        else:
            self.kv = GaugeMetricFamily(
                "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=names)
        self.sleep = GaugeMetricFamily(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            labels=[*names, "sleep_state"])
        self.cache_info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            labels=[*names, "block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                    "num_gpu_blocks", "swap_space_bytes"])
        self.preemptions = CounterMetricFamily(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels=names)
        self.prompt = CounterMetricFamily("vllm:prompt_tokens", "Number of prefill tokens processed.", labels=names)
        self.generation = CounterMetricFamily(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels=names)
        self.success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"])
        self.prefix_queries = CounterMetricFamily(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", labels=names)
        self.prefix_hits = CounterMetricFamily(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels=names)
        self.iteration = HistogramMetricFamily(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", labels=names)
        self.fillers = [
            (HistogramMetricFamily(name, doc, labels=names), buckets, source, mean)
            for name, doc, buckets, source, mean in _FILLER_HISTOGRAMS
        ]

    def label_values(self, model: str, engine: int) -> list[str]:
        return [model] if self.legacy else [str(engine), model]

    def add_engine(self, values: list[str], view: EngineView, created: float | None) -> None:
        """The series of one engine in every family."""
        engine = view.counters
        self.running.add_metric(values, float(view.running))
        self.waiting.add_metric(values, float(view.waiting))
        if not self.legacy:  # vLLM 0.32's family (V1 engines)
            self.by_reason.add_metric([*values, "capacity"], float(view.waiting - view.deferred))
            self.by_reason.add_metric([*values, "deferred"], float(view.deferred))
        self.kv.add_metric(values, engine.kv_usage)
        states = {"awake": not view.asleep, "weights_offloaded": view.asleep, "discard_all": False}
        for state in SLEEP_STATES:
            self.sleep.add_metric([*values, state], 1.0 if states[state] else 0.0)
        self.cache_info.add_metric([*values, "16", "auto", "True", "0.9", "4096", "0"], 1.0)
        self.preemptions.add_metric(values, engine.preemptions, created=created)
        self.prompt.add_metric(values, engine.prompt_tokens, created=created)
        self.generation.add_metric(values, engine.generation_tokens, created=created)
        for reason in FINISHED_REASONS:
            self.success.add_metric([*values, reason], engine.success[reason], created=created)
        self.prefix_queries.add_metric(values, engine.prompt_tokens, created=created)
        self.prefix_hits.add_metric(values, math.floor(engine.prompt_tokens * 0.25), created=created)
        self._add_histograms(values, engine, created)

    def _add_histograms(self, values: list[str], engine: EngineCounters, created: float | None) -> None:
        cumulative = 0.0
        rows: list[tuple[str, float]] = []
        for upper, count in zip((*ITERATION_TOKENS_BUCKETS, math.inf), engine.step_buckets, strict=True):
            cumulative += count
            rows.append((floatToGoString(upper), cumulative))
        self.iteration.add_metric(values, rows, engine.step_sum)
        _add_created(self.iteration, values, self.names, created)
        finished = engine.finished
        for family, buckets, source, mean in self.fillers:
            if source == "prompt":
                total = engine.prompt_tokens
            elif source == "generation":
                total = engine.generation_tokens
            else:
                total = finished * mean
            family.add_metric(values, cumulative_profile(finished, buckets), total)
            _add_created(family, values, self.names, created)

    def families(self, model: str) -> list[Metric]:
        """In page order; V0 pages swap the sleep and prefix-cache families for the swap and CPU-cache gauges."""
        families: list[Metric] = [self.running, self.waiting, self.kv]
        if self.legacy:
            swapped = GaugeMetricFamily(
                "vllm:num_requests_swapped", "Number of requests swapped to CPU.", labels=self.names)
            swapped.add_metric([model], 0.0)
            cpu_kv = GaugeMetricFamily(
                "vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", labels=self.names)
            cpu_kv.add_metric([model], 0.0)
            families.extend([swapped, cpu_kv])
        else:
            families.extend([self.by_reason, self.sleep, self.prefix_queries, self.prefix_hits])
        families.extend([self.cache_info, self.preemptions, self.prompt, self.generation, self.success,
                         self.iteration])
        families.extend(family for family, _, _, _ in self.fillers)
        return families
