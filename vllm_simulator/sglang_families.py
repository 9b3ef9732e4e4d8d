"""SGLang's scheduler families (``SchedulerMetricsCollector``), as prometheus_client's MultiProcessCollector serves them.

SGLang always runs prometheus_client in multiprocess mode, and that mode shapes the page: no ``_created`` samples,
labels in sorted order, gauges of the default mode ``all`` labelled with the writer's ``pid``, ``mostrecent`` gauges
absent until first set, histogram series as ``_sum``, ``_bucket``..., ``_count``, and a labelled family absent until
one of its children exists. Which series exist when is the scheduler's doing: the constants and the pre-seeded
counters from the start, the ``log_stats`` gauges once written, the moving counters once moved.
"""

from __future__ import annotations

from typing import Final

from .sglang_engine import MAX_TOTAL_NUM_TOKENS, SglangEngine, WrittenGauges
from .sglang_series import Labels, Page, series

#: SCHEDULER_STAGE_CATEGORIES (observability/scheduler_stage_metrics.py), pre-seeded with forward_overlap="none".
STAGES: Final = ("other", "recv_requests", "process_input_requests", "get_next_batch_to_run", "process_queue",
                 "run_batch", "process_batch_result", "sanity_check_cache", "idle")
ROUTING_KEY_BOUNDS: Final = (1, 2, 3, 5, 7, 10, 20, 50, 100, 200)
_IMBALANCE_BUCKETS: Final = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)
_SYNC_WAIT_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
#: emit_constants at startup: (name, help, value); the KV pool follows MAX_TOTAL_NUM_TOKENS, page size 1.
_CONSTANTS: Final = (
    ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", MAX_TOTAL_NUM_TOKENS),
    ("sglang:weight_memory_usage_gb", "Memory used by model weights in GB.", 2.06),
    ("sglang:kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB.", 1.38),
)
_CONSTANTS_AFTER_GRAPH: Final = (
    ("sglang:page_size", "KV cache page size in tokens.", 1),
    ("sglang:num_pages", "Number of KV cache pages.", MAX_TOTAL_NUM_TOKENS),
    ("sglang:context_len", "Maximum context length.", 2048),
    ("sglang:startup_available_gpu_memory_gb", "Available GPU memory in GB at startup.", 21.7),
)

_DP_PAIRS_DOC: Final = (
    "Causal (query, key) pairs attended by MLP-sync steps on this DP rank, pricing every layer as full attention: a "
    "decode row reads its sequence, a prefill chunk its prefix plus the pairs within the chunk. kind=scheduled: this "
    "rank; kind=imbalance: the busiest rank's excess over this rank. The context-length counterpart of "
    "sglang:dp_attention_tokens_total; like it, speculative-decode steps count one query per row. Sliding-window "
    "layers execute fewer pairs than counted, so on hybrid-SWA models long rows are overstated.")


def scheduler_labels(model: str, index: int, engines: int) -> dict[str, str]:
    """init_new's labels: dp_rank only when data parallel gives the scheduler one."""
    labels = {"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    if engines > 1:
        labels["dp_rank"] = str(index)
    return labels


def add_scheduler(page: Page, engine: SglangEngine, labels: Labels, pid: int) -> None:
    """Every series one scheduler has written so far, in the collector's declaration order."""
    if engine.gauges is not None:
        _log_stats(page, engine.gauges, labels, pid)
    for mode, count in sorted(engine.passes.items()):
        page.counter("sglang:cuda_graph_passes_total", "Total number of forward passes categorized by CUDA graph.",
                     series(labels, mode=mode), count)
    if engine.gauges is not None:
        _routing_keys(page, labels)
    _execution(page, engine, labels)
    _constants(page, labels)


def _log_stats(page: Page, g: WrittenGauges, labels: Labels, pid: int) -> None:
    """The gauges SchedulerMetricsCollector.log_stats sets, all at once, with their last values."""
    used, evictable = g.used_tokens, g.evictable_tokens
    rows: list[tuple[str, str, float]] = [
        ("num_running_reqs", "The number of running requests.", g.running),
        ("num_queue_reqs", "The number of requests in the waiting queue.", g.queue),
        ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
        ("gen_throughput", "The generation throughput (token/s).", g.gen_throughput),
        ("cache_hit_rate", "The prefix cache hit rate.", g.cache_hit_rate),
        ("decode_sum_seq_lens", "The sum of all sequence lengths in decode.", g.decode_sum_seq_lens),
        ("token_usage", "The token usage.", g.token_usage),
        ("full_token_usage", "The token usage for full attention layers.", g.token_usage),
        ("swa_token_usage", "The token usage for SWA layers.", 0.0),
        ("mamba_usage", "The token usage for Mamba layers.", 0.0),
        ("num_used_tokens", "The number of used tokens.", used),
        ("kv_available_tokens", "Number of free token slots in the KV cache pool.",
         MAX_TOTAL_NUM_TOKENS - used - evictable),
        ("kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool.", evictable),
        ("kv_used_tokens", "Number of actively used token slots in the KV cache pool.", used),
        ("swa_available_tokens", "Number of free token slots in the SWA pool (hybrid-SWA only).", 0),
        ("swa_evictable_tokens", "Number of evictable (radix-cached) token slots in the SWA pool.", 0),
        ("swa_used_tokens", "Number of actively used token slots in the SWA pool.", 0),
        ("mamba_available_tokens", "Number of free state slots in the mamba SSM pool (hybrid-SSM only).", 0),
        ("mamba_evictable_tokens", "Number of evictable (radix-cached) state slots in the mamba SSM pool.", 0),
        ("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool.", 0),
        ("spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus token per "
         "forward).", 0.0),
        ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).", 0.0),
        ("spec_cap_length", "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot "
         "(0 when no cap is scheduled).", 0.0),
        ("spec_block_accept_length", "Mean uncapped full-block accept length per verify step (accept + "
         "cap-trimmed drafts; exact only in DSpark cap-accept mode).", 0.0),
        ("spec_num_steps", "Currently active speculative_num_steps.", 0),
        ("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens (decouples from steps under "
         "topk>1).", 0),
    ]
    for name, doc, value in rows:
        page.gauge("sglang:" + name, doc, labels, value)
    # Declared without multiprocess_mode, so 'all': one series per writing process, labelled with its pid.
    page.gauge("sglang:num_retracted_reqs", "The number of retracted requests.", labels, 0, pid=pid)
    page.gauge("sglang:num_paused_reqs", "The number of paused requests by async weight sync.", labels, 0, pid=pid)
    tail: list[tuple[str, str, float]] = [
        ("num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue.", 0),
        ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue.", 0),
        ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue.", 0),
        ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue.", 0),
        ("num_decode_host_receive_queue_reqs", "Requests in the decode transfer queue receiving into host memory "
         "or waiting for device admission.", 0),
        ("num_decode_deferred_kv_release_reqs", "The number of failed decode requests whose KV allocations are "
         "held pending transfer drain acknowledgement or timeout.", 0),
        ("pending_prealloc_token_usage", "The token usage for pending preallocated tokens (not preallocated yet).",
         0.0),
        ("prealloc_full_token_usage", "Share of the full-attention KV pool held by decode requests whose KV "
         "transfer is pending (preallocated, not yet running); same capacity basis as sglang:full_token_usage.",
         0.0),
        ("prealloc_swa_token_usage", "Share of the SWA KV pool held by decode requests whose KV transfer is "
         "pending; same capacity basis as sglang:swa_token_usage.", 0.0),
        ("utilization", "The utilization.", 0.0),
        # stats.fwd_occupancy stays NaN unless SGLANG_ENABLE_METRICS_DEVICE_TIMER=1, and log_stats sets it anyway.
        ("fwd_occupancy", "Forward pass GPU occupancy percentage.", float("nan")),
        ("new_token_ratio", "The new token ratio.", g.new_token_ratio),
        ("is_cuda_graph", "Whether the batch is using CUDA graph.", 0),
    ]
    for name, doc, value in tail:
        page.gauge("sglang:" + name, doc, labels, value)


def _routing_keys(page: Page, labels: Labels) -> None:
    """log_stats sets the routing-key gauges too; with no routing keys every gt/le bucket is 0."""
    page.gauge("sglang:num_unique_running_routing_keys", "Number of unique routing keys in running batch.",
               labels, 0)
    bounds = [str(b) for b in ROUTING_KEY_BOUNDS]
    edges = list(zip(["0", *bounds], [*bounds, "+Inf"], strict=True))
    for name, doc in (
        ("sglang:routing_key_running_req_count",
         "Distribution of routing keys by running request count (gt < count <= le)."),
        ("sglang:routing_key_all_req_count",
         "Distribution of routing keys by running+waiting request count (gt < count <= le)."),
    ):
        for gt, le in edges:
            page.gauge(name, doc, series(labels, gt=gt, le=le), 0)


def _execution(page: Page, engine: SglangEngine, labels: Labels) -> None:
    """The execution counters: realtime tokens once moved, the pre-seeded ones from the collector's start."""
    for mode in ("prefill_compute", "prefill_cache", "decode"):
        if mode in engine.realtime:
            page.counter("sglang:realtime_tokens_total",
                         "Total number of tokens processed (updated on each log interval). "
                         "mode: prefill_compute, prefill_cache, decode.",
                         series(labels, mode=mode), engine.realtime[mode])
    effective = {"input": engine.effective_input, "device_hit": 0, "host_hit": 0, "storage_hit": 0}
    for mode, value in effective.items():
        page.counter("sglang:prefill_effective_tokens_total",
                     "Effective prefill tokens with retracted-request re-counts excluded, updated on each log "
                     "interval. mode: device_hit, host_hit, storage_hit, input. Windowed prefix cache hit rate = "
                     "rate(sum of *_hit) / rate(sum of all modes); per-tier rate uses a single *_hit mode in the "
                     "numerator.", series(labels, mode=mode), value)
    idle = max(0.0, engine.clock - engine.busy_time)
    page.counter("sglang:scheduler_idle_seconds_total",
                 "Total wall time while the scheduler has no runnable or queued work.", labels, float(int(idle)))
    page.counter("sglang:scheduler_process_cpu_seconds_total",
                 "Total CPU time consumed by the scheduler process across all threads.", labels,
                 round(0.05 * int(idle) + 0.9 * int(engine.busy_time), 3))
    stage_doc = ("Total scheduler-loop wall time exclusively attributed to each stage. forward_overlap (full, "
                 "partial, none): full=both endpoints active, partial=one, none=no observed overlap (including "
                 "unavailable timing). Not exact overlapped/exposed seconds.")
    spent = {"idle": float(int(idle)), "run_batch": float(int(engine.busy_time * 0.8))}
    for stage in STAGES:
        page.counter("sglang:scheduler_stage_seconds_total", stage_doc,
                     series(labels, category=stage, forward_overlap="none"), spent.get(stage, 0.0))
    _dp_attention(page, labels)


def _dp_attention(page: Page, labels: Labels) -> None:
    """Pre-seeded (and cached) in the collector's constructor, so present at 0 even without DP attention."""
    for name, doc, key, values in (
        ("sglang:dp_attention_tokens_total", "Tokens of MLP-sync steps on this DP rank. kind=scheduled: tokens this "
         "rank ran; kind=imbalance: tokens the busiest rank ran beyond this rank, i.e. capacity lost to DP imbalance "
         "on this rank. On speculative-decode steps the unit is batch rows (requests).", "kind",
         ("scheduled", "imbalance")),
        ("sglang:dp_attention_steps_total", "MLP-sync steps on this DP rank. rank_state=idle: this rank had no tokens "
         "and only ran to keep the DP collectives in lockstep.", "rank_state", ("active", "idle")),
        ("sglang:dp_attention_pairs_total", _DP_PAIRS_DOC, "kind", ("scheduled", "imbalance")),
    ):
        for value in values:
            page.counter(name, doc, series(labels, **{key: value}), 0)
    page.histogram("sglang:dp_attention_token_imbalance_ratio",
                   "Per MLP-sync step, max tokens over mean tokens across the DP ranks (1.0 = balanced, num_dp_ranks "
                   "= one busy rank). Reported once per engine, by the scheduler of DP rank 0.",
                   labels, _IMBALANCE_BUCKETS, 0, 0.0)
    page.histogram("sglang:dp_attention_sync_wait_seconds",
                   "Wall time of this DP rank's scheduler MLP-sync all-gather per step. On the gloo path (the default "
                   "with overlap scheduling) this is waiting for the slowest rank; on the device-group paths it also "
                   "includes the gather's stream sync.", labels, _SYNC_WAIT_BUCKETS, 0, 0.0)



def _constants(page: Page, labels: Labels) -> None:
    """emit_constants, once at startup: present from the first scrape, unchanged for the process's life."""
    for name, doc, value in _CONSTANTS:
        page.gauge(name, doc, labels, value)
    page.gauge("sglang:graph_memory_usage_gb", "Memory used by captured device graphs in GB.",
               series(labels, phase="decode"), 0.19)
    for name, doc, value in _CONSTANTS_AFTER_GRAPH:
        page.gauge(name, doc, labels, value)
