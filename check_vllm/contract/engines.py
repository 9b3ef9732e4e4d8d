"""The engines whose /metrics page check_vllm reads, one row each: which samples give the numbers the judge
reads (check_vllm.contract.values.EngineReading's fields), which label tells one engine of a page from another,
and how the output names it. The judge judges readings and never asks which engine gave them: only the page's
reader (check_vllm.server.reading) uses these rows, and it picks the row by the families the page carries. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple


class Engine(NamedTuple):
    #: How the output names it.
    name: str
    #: Its families' prefix on the page.
    prefix: str
    #: Sample name -> EngineReading field. Counters keep `_total` on their samples.
    samples: Mapping[str, str]
    #: Counters' `_created` samples (prometheus_client's): the birth of the process that owns them.
    created: frozenset[str] = frozenset()
    #: The label naming one engine of a page (data parallel); "": the page is one engine.
    engine_label: str = ""
    #: The work gauges, as a missing-work message names them.
    work: str = ""


VLLM = Engine(
    "vLLM", "vllm:",
    MappingProxyType({
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:iteration_tokens_total_count": "steps",
        "vllm:iteration_tokens_total_sum": "step_tokens",
        "vllm:generation_tokens_total": "generation_tokens",
        "vllm:prompt_tokens_total": "prompt_tokens",
        "vllm:request_success_total": "finished",
        "vllm:kv_cache_usage_perc": "kv_cache",
        "vllm:gpu_cache_usage_perc": "kv_cache",  # vLLM < 0.10 (V0) name
        "vllm:num_preemptions_total": "preemptions",
    }),
    frozenset({"vllm:generation_tokens_created", "vllm:prompt_tokens_created", "vllm:request_success_created",
               "vllm:iteration_tokens_total_created"}),
    engine_label="engine", work="vllm:num_requests_running/waiting",
)

#: llama.cpp's `llama-server --metrics` (tools/server/server.cpp, the metrics route): no labels, no
#: `_created`; `n_decode_total` counts llama_decode() calls, a step counter that moves on every decode, while
#: `tokens_predicted_total` moves only when a request ends. `requests_processing` is the work gauge,
#: `requests_deferred` the queue. The per-second gauges (predicted_tokens_seconds) are reset by every read:
#: never asked.
LLAMA_CPP = Engine(
    "llama.cpp", "llamacpp:",
    MappingProxyType({
        "llamacpp:requests_processing": "running",
        "llamacpp:requests_deferred": "waiting",
        "llamacpp:n_decode_total": "steps",
        "llamacpp:tokens_predicted_total": "generation_tokens",
        "llamacpp:prompt_tokens_total": "prompt_tokens",
    }),
    work="llamacpp:requests_processing/requests_deferred",
)

#: Every engine, the first the default where a page says nothing.
ENGINES = (VLLM, LLAMA_CPP)
#: Each sample name the rows read, with its row.
ROW_OF: Mapping[str, Engine] = MappingProxyType({name: row for row in ENGINES for name in (*row.samples, *row.created)})
