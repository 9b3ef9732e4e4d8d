"""llama.cpp's /metrics page as ``server_task_result_metrics::to_metrics()`` (tools/server/server-task.cpp) writes it.

Not prometheus_client: a C++ ``std::stringstream`` fed ``# HELP``, ``# TYPE`` and one sample per family, ten
counters then five gauges, no labels, no ``_created``, no ``# EOF``. Each value is a ``double`` printed with the
stream's defaults, ``%g`` with 6 significant digits: 6194 prints ``6194`` but 1234567 prints ``1.23457e+06``, so
a counter past 10^6 may not visibly move between two reads. ``tests/fixtures/real/llamacpp/`` holds real pages.
"""

from __future__ import annotations

from typing import Final

from .llamacpp_engine import LlamacppEngine

CONTENT_TYPE: Final = "text/plain; version=0.0.4"

COUNTERS: Final = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
GAUGES: Final = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


def cpp_double(value: float) -> str:
    """``std::ostream << double`` with default flags and precision: C's ``%g``, 6 significant digits."""
    return format(float(value), "g")


def values(engine: LlamacppEngine, processing: int, deferred: int) -> dict[str, float]:
    """Every family's value as one read sees it; the read empties the per-second gauges' buckets."""
    prompt_rate, predict_rate = engine.read()
    return {
        "prompt_tokens_total": engine.prompt.count,
        "prompt_tokens_cached_total": engine.n_prompt_cached,
        "prompt_seconds_total": engine.prompt.time_us / 1e6,
        "tokens_predicted_total": engine.predict.count,
        "tokens_predicted_seconds_total": engine.predict.time_us / 1e6,
        "n_decode_total": engine.n_decode,
        "n_tokens_max": engine.n_tokens_max,
        "spec_decode_num_draft_tokens_total": 0,
        "spec_decode_num_accepted_tokens_total": 0,
        "spec_decode_num_drafts_total": 0,
        "prompt_tokens_seconds": prompt_rate,
        "predicted_tokens_seconds": predict_rate,
        "requests_processing": processing,
        "requests_deferred": deferred,
        "n_busy_slots_per_decode": engine.n_busy_slots / max(engine.n_decode, 1),
    }


def render(engine: LlamacppEngine, processing: int, deferred: int) -> bytes:
    """The page, byte for byte in to_metrics()'s layout."""
    value = values(engine, processing, deferred)
    lines: list[str] = []
    for kind, items in (("counter", COUNTERS), ("gauge", GAUGES)):
        for name, help_text in items:
            lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                      f"llamacpp:{name} {cpp_double(value[name])}"]
    return ("\n".join(lines) + "\n").encode()
