"""One SGLang scheduler as the simulator models it: what it counts per forward pass and when it writes its gauges.

SGLang's work gauges are not read at scrape time: the scheduler writes them (``SchedulerMetricsCollector.log_stats``)
after every prefill batch, every ``decode_log_interval`` (40) decode steps, and, when fully idle, as soon as the
running gauge disagrees with the empty batch or 30 s after the last write. In between they hold their last value, so
a frozen scheduler shows whatever it wrote last. The source lines behind each rule are in
``tests/fixtures/source/sglang-0.5.23/README.md``; this module only follows them.

Events are whole (a decode step, a prefill batch), counted on a per-engine busy clock, so the counters stay integers
as SGLang's are and "how much moved in 0.2 s" stays predictable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Final

from .engine import BUSY_WAITING, EngineCounters
from .scenarios import EngineMode

#: Decode steps per second of a busy engine; each step generates one token per running request.
DECODE_STEPS_PER_SECOND: Final = 50.0
#: Prefill batches per second of a busy engine: one request finishes and a queued one is admitted.
PREFILLS_PER_SECOND: Final = 1.0
#: Prompt tokens of one background request.
PROMPT_TOKENS_PER_REQUEST: Final = 200
#: A long prompt is read in chunks (--chunked-prefill-size), each chunk a prefill batch of its own.
PREFILL_CHUNKS_PER_SECOND: Final = 2.0
PREFILL_CHUNK_TOKENS: Final = 2048
#: KV pool size in tokens (sglang:max_total_num_tokens) that token counts and usage ratios refer to.
MAX_TOTAL_NUM_TOKENS: Final = 65536
#: The startup warmup request (http_server._execute_server_warmup): "The capital city of France is", 8 new tokens.
WARMUP_PROMPT_TOKENS: Final = 6
WARMUP_MAX_NEW_TOKENS: Final = 8
#: cuda_graph_passes_total modes as a default CUDA build runs them (prefill eager, decode in a CUDA graph).
PREFILL_PASS: Final = "prefill_none"
DECODE_PASS: Final = "decode_cuda_graph"


@dataclass(frozen=True)
class SglangOptions:
    """SGLang's settings the simulator honours; defaults are SGLang 0.5.23's (tests shorten the waits)."""

    watchdog_timeout: float = 300.0  # --watchdog-timeout
    health_check_timeout: float = 20.0  # SGLANG_HEALTH_CHECK_TIMEOUT
    health_poll_seconds: float = 1.0  # health_generate's asyncio.sleep(1) between looks
    idle_log_seconds: float = 30.0  # _maybe_log_idle_metrics' rate limit
    decode_log_interval: int = 40  # --decode-log-interval
    skip_server_warmup: bool = False  # --skip-server-warmup


@dataclass(frozen=True)
class WrittenGauges:
    """The values of the last ``log_stats`` call: what the page shows until the next one."""

    running: int
    queue: int
    used_tokens: int
    evictable_tokens: int
    gen_throughput: float
    decode_sum_seq_lens: int = 0
    cache_hit_rate: float = 0.0
    new_token_ratio: float = 0.0

    @property
    def token_usage(self) -> float:
        return self.used_tokens / MAX_TOTAL_NUM_TOKENS


@dataclass
class SglangEngine(EngineCounters):
    """EngineCounters (kept for the vLLM bookkeeping it shares) plus SGLang's per-scheduler series."""

    options: SglangOptions = field(default_factory=SglangOptions)
    clock: float = 0.0  # seconds since this scheduler's collector was made
    busy_time: float = 0.0  # seconds spent busy, the clock of the background events
    decode_ct: int = 0  # forward_ct_decode
    realtime: dict[str, int] = field(default_factory=dict)  # realtime_tokens_total by mode, absent until moved
    passes: dict[str, int] = field(default_factory=dict)  # cuda_graph_passes_total by mode
    effective_input: int = 0  # prefill_effective_tokens_total{mode="input"}
    gauges: WrittenGauges | None = None  # None: log_stats never ran
    last_log: float = 0.0  # collector.last_log_time, on ``clock``
    cached_tokens: int = 0  # tokens the radix cache keeps after requests finish (evictable)
    requests: int = 0  # finished requests the tokenizer counted
    request_prompt: int = 0
    request_generation: int = 0

    @classmethod
    def started(cls, options: SglangOptions) -> SglangEngine:
        """A new scheduler, after SGLang's startup warmup request unless it is skipped."""
        engine = cls(options=options)
        if not options.skip_server_warmup:
            engine.serve(WARMUP_PROMPT_TOKENS, WARMUP_MAX_NEW_TOKENS)
        return engine

    # --- what moves the series -------------------------------------------------------------------------------

    def _count(self, table: dict[str, int], key: str, amount: int) -> None:
        if amount:  # increment_realtime_tokens skips zero deltas, so a mode appears only once it moved
            table[key] = table.get(key, 0) + amount

    def _write(self, gauges: WrittenGauges, at: float) -> None:
        self.gauges = gauges
        self.last_log = at

    def _used(self, running: int, per_request: int) -> int:
        return min(MAX_TOTAL_NUM_TOKENS, running * per_request)

    def _free_evictable(self, used: int) -> int:
        return min(self.cached_tokens, MAX_TOTAL_NUM_TOKENS - used)

    def prefill(self, tokens: int, running_before: int, queue: int, used: int) -> None:
        """One prefill batch (report_prefill_stats): counters, then every gauge written."""
        self._count(self.realtime, "prefill_compute", tokens)
        self._count(self.passes, PREFILL_PASS, 1)
        self.effective_input += tokens
        last = self.gauges.gen_throughput if self.gauges else 0.0
        self._write(WrittenGauges(running_before, queue, used, self._free_evictable(used), last,
                                  self.gauges.decode_sum_seq_lens if self.gauges else 0, 0.0, 0.7), self.clock)

    def decode(self, steps: int, running: int, queue: int, used: int) -> None:
        """``steps`` decode steps of a batch of ``running``: counted each step, gauges written every 40th."""
        if steps <= 0:
            return
        self._count(self.realtime, "decode", steps * running)
        self._count(self.passes, DECODE_PASS, steps)
        before, self.decode_ct = self.decode_ct, (self.decode_ct + steps) % (1 << 30)
        interval = self.options.decode_log_interval
        if (before + steps) // interval > before // interval:
            old = self.gauges or WrittenGauges(0, 0, 0, 0, 0.0)
            self._write(replace(old, running=running, queue=queue, used_tokens=used,
                                evictable_tokens=self._free_evictable(used),
                                gen_throughput=running * DECODE_STEPS_PER_SECOND, decode_sum_seq_lens=used),
                        self.clock)

    def finish(self, requests: int, prompt: int, generation: int) -> None:
        """Requests that ended: the tokenizer counts them, the radix cache keeps their tokens."""
        self.requests += requests
        self.request_prompt += prompt
        self.request_generation += generation
        self.cached_tokens = min(MAX_TOTAL_NUM_TOKENS, self.cached_tokens + prompt + generation)

    def idle(self, dt: float) -> None:
        """``dt`` seconds of a fully idle scheduler loop (on_idle -> _maybe_log_idle_metrics)."""
        start, self.clock = self.clock, self.clock + dt
        idle = WrittenGauges(0, 0, 0, self.cached_tokens, 0.0,
                             self.gauges.decode_sum_seq_lens if self.gauges else 0,
                             self.gauges.cache_hit_rate if self.gauges else 0.0,
                             self.gauges.new_token_ratio if self.gauges else 0.0)
        if self.gauges is not None and self.gauges.running != 0:
            self._write(idle, start)  # the running gauge disagrees with the empty batch: published at once
        period = self.options.idle_log_seconds
        if self.clock > self.last_log + period:
            self._write(idle, self.last_log + period * math.floor((self.clock - self.last_log) / period))

    # --- EngineCounters' interface -----------------------------------------------------------------------------

    def advance(self, mode: EngineMode, dt: float, slots: int, kv_busy: float) -> None:
        """Credit ``dt`` seconds in ``mode`` the way SGLang's scheduler loop would spend them."""
        super().advance(mode, dt, slots, kv_busy)
        if mode is EngineMode.BUSY:
            self._busy(dt, slots)
        elif mode is EngineMode.PREFILL:
            self._long_prefill(dt)
        elif mode in (EngineMode.IDLE, EngineMode.SLEEPING):
            self.idle(dt)
        else:  # frozen (stuck, hung) or a queue that cannot run: no batch, no on_idle publish, nothing written
            self.clock += dt

    def _busy(self, dt: float, running: int) -> None:
        """Background load: a decode step every 1/50 s, a request finished and one admitted every second."""
        b0, b1 = self.busy_time, self.busy_time + dt
        self.busy_time = b1
        per_request = PROMPT_TOKENS_PER_REQUEST + int(running * DECODE_STEPS_PER_SECOND / PREFILLS_PER_SECOND)
        used = self._used(running, per_request)
        steps = [k / DECODE_STEPS_PER_SECOND for k in range(math.floor(b0 * DECODE_STEPS_PER_SECOND) + 1,
                                                           math.floor(b1 * DECODE_STEPS_PER_SECOND) + 1)]
        prefills = {j / PREFILLS_PER_SECOND for j in range(math.floor(b0 * PREFILLS_PER_SECOND) + 1,
                                                           math.floor(b1 * PREFILLS_PER_SECOND) + 1)}
        base = self.clock
        for at in sorted(set(steps) | prefills):
            self.clock = base + (at - b0)
            if at in prefills:  # the finished request leaves, the next one is read beside the others
                self.finish(1, PROMPT_TOKENS_PER_REQUEST, per_request - PROMPT_TOKENS_PER_REQUEST)
                self.prefill(PROMPT_TOKENS_PER_REQUEST, running - 1, BUSY_WAITING, used)
            if at in steps:
                self.decode(1, running, BUSY_WAITING, used)
        self.clock = base + dt

    def _long_prefill(self, dt: float) -> None:
        """One long prompt read chunk by chunk: prefill batches with an empty running batch, the pool filling."""
        c0, c1 = self.busy_time, self.busy_time + dt
        self.busy_time = c1
        base = self.clock
        for k in range(math.floor(c0 * PREFILL_CHUNKS_PER_SECOND) + 1, math.floor(c1 * PREFILL_CHUNKS_PER_SECOND) + 1):
            self.clock = base + (k / PREFILL_CHUNKS_PER_SECOND - c0)
            self.prefill(PREFILL_CHUNK_TOKENS, 0, 0, self._used(1, PREFILL_CHUNK_TOKENS * k))
        self.clock = base + dt

    def serve(self, prompt_tokens: int, max_tokens: int) -> None:
        """One real request on this engine: a prefill batch, ``max_tokens - 1`` decode steps, then finished."""
        super().serve(prompt_tokens, max_tokens)
        used = self._used(1, prompt_tokens + max_tokens)
        self.prefill(prompt_tokens, 0, 0, used)
        self.decode(max_tokens - 1, 1, 0, used)
        self.finish(1, prompt_tokens, max_tokens)

    def health_prefill(self) -> None:
        """An idle engine runs /health_generate's one-token request: one prefill batch, never counted as a request."""
        self.prefill(1, 0, 0, 1)
