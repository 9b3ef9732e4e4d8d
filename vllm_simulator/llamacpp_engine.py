"""llama.cpp's ``server_metrics`` (tools/server/server-common.h) as one simulated llama-server counts them.

What moves when, as b11434's source has it: ``n_decode`` by one per ``llama_decode()`` call (each decode of a busy
server generates one token per processing slot; a prompt is decoded in batches of up to ``n_batch`` tokens),
``n_busy_slots`` by the slots processing at each decode; the prompt and prediction totals only when a prompt batch
was synchronised or a request ended (a request of minutes moves ``tokens_predicted_total`` once, at its end); the
two per-second gauges come from buckets that every read of /metrics empties. Decodes are whole events on the
engine's own busy clock, so the counters stay integers, as llama.cpp's are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from .engine import EngineCounters
from .scenarios import EngineMode

#: llama_decode() calls per second of a busy server (one token per processing slot each; the recorded tiny model
#: made ~1970/s on 2 CPU cores: slower here keeps the numbers readable).
DECODES_PER_SECOND: Final = 50.0
#: A long prompt: decodes per second of n_batch (2048, common.h) prompt tokens each.
PREFILL_DECODES_PER_SECOND: Final = 2.0
N_BATCH: Final = 2048
#: Prompt tokens of a background request (n_tokens_max starts there and grows by one per decode).
BACKGROUND_PROMPT_TOKENS: Final = 200
#: Microseconds per prompt token and per generated token (the recorded completion: 3 tokens in 2424 us).
PROMPT_US_PER_TOKEN: Final = 800
PREDICT_US_PER_TOKEN: Final = 500


@dataclass(frozen=True)
class LlamacppOptions:
    """llama-server's settings the simulator honours; defaults are b11434's, plus what a test needs to shorten.

    ``metrics``: --metrics (off: /metrics answers 501). ``slots``: /slots (off, --no-slots: 501 too).
    ``sleep_idle_seconds``: --sleep-idle-seconds (None: -1, never sleeps). ``reload_seconds``: how long waking
    reloads the model. ``initial_decodes``: each new process starts as one that has already made that many decodes,
    so a page shows the 6-digit rounding of counters past 10^6 (1200000000 prints ``1.2e+09``) without simulating
    hours of work. ``models``: router mode (--models-dir holding these), one child server per model, each loaded at
    start but the ``unloaded`` ones (a request naming one loads it, in ``reload_seconds``).
    """

    metrics: bool = True
    slots: bool = True
    sleep_idle_seconds: float | None = None
    reload_seconds: float = 0.3
    initial_decodes: int = 0
    n_ctx: int = 2048  # per slot: the recorded server's n_ctx_slot
    models: tuple[str, ...] = ()
    unloaded: tuple[str, ...] = ()
    #: --api-key: every route but the public ones answers 401 without it (tools/server/server-http.cpp).
    api_key: str | None = None


@dataclass
class Bucket:
    """``server_metrics::bucket``: tokens, decode steps and microseconds."""

    count: int = 0
    steps: int = 0
    time_us: int = 0

    def add(self, count: int, steps: int, time_us: int) -> None:
        self.count += count
        self.steps += steps
        self.time_us += time_us

    def per_second(self) -> float:
        """``n_per_second``: steps over time, 0 with no time."""
        return self.steps / self.time_us * 1e6 if self.time_us > 0 else 0.0


@dataclass
class LlamacppEngine(EngineCounters):
    """EngineCounters (the interface the simulated process drives) holding llama.cpp's ``server_metrics``."""

    options: LlamacppOptions = field(default_factory=LlamacppOptions)
    prompt: Bucket = field(default_factory=Bucket)
    predict: Bucket = field(default_factory=Bucket)
    prompt_bucket: Bucket = field(default_factory=Bucket)  # emptied by each read of /metrics
    predict_bucket: Bucket = field(default_factory=Bucket)
    n_prompt_cached: int = 0
    n_tokens_max: int = 0
    n_decode: int = 0
    n_busy_slots: int = 0
    busy_time: float = 0.0  # the clock of background decodes
    busy_decoded: int = 0  # tokens each background slot generated so far in the current run of work
    busy_slots: int = 0  # slots of that run, to finish its requests when the work ends
    task_id: int = 0  # the last task the server made (a slot's id_task)

    @classmethod
    def started(cls, options: LlamacppOptions) -> LlamacppEngine:
        """A new process; with ``initial_decodes``, one with that history (one slot per decode, one token each)."""
        done = max(0, options.initial_decodes)
        engine = cls(options=options, n_decode=done, n_busy_slots=done)
        if done:
            engine.predict.add(done, done, done * PREDICT_US_PER_TOKEN)
            engine.prompt.add(done // 4, done // 4, done // 4 * PROMPT_US_PER_TOKEN)
            engine.n_tokens_max = options.n_ctx - 1
        return engine

    # --- EngineCounters' interface -----------------------------------------------------------------------------

    def advance(self, mode: EngineMode, dt: float, slots: int, kv_busy: float) -> None:
        """Credit ``dt`` seconds in ``mode``: decodes while busy or reading a long prompt, nothing while frozen."""
        if mode is EngineMode.BUSY:
            self._decodes(dt, DECODES_PER_SECOND, lambda n: self._generate(n, slots))
        elif mode is EngineMode.PREFILL:
            self._decodes(dt, PREFILL_DECODES_PER_SECOND, self._read_prompt)
        elif mode in (EngineMode.IDLE, EngineMode.SLEEPING):
            self._finish_background()

    def settle(self, mode: EngineMode, kv_busy: float) -> None:
        """Entering idle ends the background requests: only then do their tokens count as predicted."""
        if mode in (EngineMode.IDLE, EngineMode.SLEEPING):
            self._finish_background()

    def serve(self, prompt_tokens: int, max_tokens: int) -> None:
        """One real request: its prompt in one decode that yields the first token, then one decode per token."""
        self.task_id += 1
        prompt_us = prompt_tokens * PROMPT_US_PER_TOKEN
        self.prompt.add(prompt_tokens, prompt_tokens, prompt_us)
        self.prompt_bucket.add(prompt_tokens, prompt_tokens, prompt_us)
        self.n_decode += max_tokens
        self.n_busy_slots += max_tokens
        # the first token comes from the prompt's logits: not a step, 1 us (the recorded 1e-06)
        predict_us = (max_tokens - 1) * PREDICT_US_PER_TOKEN + 1
        self.predict.add(max_tokens, max_tokens - 1, predict_us)
        self.predict_bucket.add(max_tokens, max_tokens - 1, predict_us)
        self.n_tokens_max = max(self.n_tokens_max, prompt_tokens + max_tokens - 1)

    # --- mechanics ---------------------------------------------------------------------------------------------

    def _decodes(self, dt: float, rate: float, each: Callable[[int], None]) -> None:
        """The whole decodes that fall into the next ``dt`` seconds of the busy clock."""
        before, self.busy_time = self.busy_time, self.busy_time + dt
        count = math.floor(self.busy_time * rate) - math.floor(before * rate)
        if count > 0:
            each(count)

    def _generate(self, decodes: int, slots: int) -> None:
        if self.busy_decoded == 0:  # the run's requests were admitted: their prompts read first
            self.task_id += slots
            tokens = slots * BACKGROUND_PROMPT_TOKENS
            self.prompt.add(tokens, tokens, tokens * PROMPT_US_PER_TOKEN)
            self.prompt_bucket.add(tokens, tokens, tokens * PROMPT_US_PER_TOKEN)
        self.n_decode += decodes
        self.n_busy_slots += decodes * slots
        self.busy_decoded += decodes
        self.busy_slots = slots
        # --context-shift keeps a slot's sequence below its context, as the recorded 2047
        self.n_tokens_max = max(self.n_tokens_max,
                                min(self.options.n_ctx - 1, BACKGROUND_PROMPT_TOKENS + self.busy_decoded))

    def _read_prompt(self, decodes: int) -> None:
        tokens = decodes * N_BATCH
        self.n_decode += decodes
        self.n_busy_slots += decodes
        self.prompt.add(tokens, tokens, tokens * PROMPT_US_PER_TOKEN)
        self.prompt_bucket.add(tokens, tokens, tokens * PROMPT_US_PER_TOKEN)

    def _finish_background(self) -> None:
        if self.busy_decoded:
            tokens = self.busy_decoded * self.busy_slots
            self.predict.add(tokens, tokens, tokens * PREDICT_US_PER_TOKEN)
            self.predict_bucket.add(tokens, tokens, tokens * PREDICT_US_PER_TOKEN)
        self.busy_decoded = 0
        self.busy_time = 0.0

    def read(self) -> tuple[float, float]:
        """The two per-second gauges, as a read of /metrics sees them, emptying their buckets."""
        rates = self.prompt_bucket.per_second(), self.predict_bucket.per_second()
        self.prompt_bucket, self.predict_bucket = Bucket(), Bucket()
        return rates
