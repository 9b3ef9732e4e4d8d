"""One simulated engine: its counters, how each ``EngineMode`` moves them, and when a real request gets a slot.

Counters advance lazily and at fixed rates (the simulator credits the work of the time since the last advance),
so "how much moved in 0.2 s" is predictable for tests and no background thread is needed.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Final

from .scenarios import EngineMode

# --- deterministic rates (per second of simulated time) ------------------------------------------------------
#: Generation tokens per second per background slot (running request) of a busy engine.
GENERATION_TOKENS_PER_SLOT_SECOND: Final = 50.0
#: Engine steps that emitted output, per second per background slot of a busy engine.
STEPS_PER_SLOT_SECOND: Final = 25.0
#: Prompt tokens per second per busy engine (step tokens per second = generation + prompt).
PROMPT_TOKENS_PER_ENGINE_SECOND: Final = 200.0
#: Finished requests (``finished_reason="stop"``) per second per busy engine.
FINISHED_REQUESTS_PER_ENGINE_SECOND: Final = 1.0
#: Busy KV-cache usage follows centre + amplitude * sin(2 pi t / period): always inside 0.3..0.9, always moving.
KV_BUSY_CENTRE: Final = 0.6
KV_BUSY_AMPLITUDE: Final = 0.3
KV_BUSY_PERIOD_SECONDS: Final = 60.0
#: long_prefill: KV usage starts at least here and grows linearly until the cap.
KV_PREFILL_START: Final = 0.1
KV_PREFILL_GROWTH_PER_SECOND: Final = 0.01
KV_PREFILL_CAP: Final = 0.95
#: A stuck engine entered from idle holds this much KV cache (work present means cache in use).
KV_STUCK: Final = 0.5
#: Background queue lengths per engine.
BUSY_WAITING: Final = 3
STUCK_WAITING: Final = 2

#: Upper bounds of vLLM's iteration-tokens histogram (as in vLLM's metrics.py), +Inf implied.
ITERATION_TOKENS_BUCKETS: Final[tuple[float, ...]] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
)
FINISHED_REASONS: Final[tuple[str, ...]] = ("stop", "length", "abort")


class Outcome(enum.Enum):
    """How a queued inference request ended, for the HTTP layer to turn into a response."""

    SERVED = "served"
    SLEEPING = "sleeping"
    DROP = "drop"  # server dead or stopped: close the connection without an answer
    GONE = "gone"  # the client hung up while waiting


def busy_kv(elapsed: float) -> float:
    """KV usage of a busy engine ``elapsed`` seconds after the simulator was made."""
    phase = 2.0 * math.pi * elapsed / KV_BUSY_PERIOD_SECONDS
    return KV_BUSY_CENTRE + KV_BUSY_AMPLITUDE * math.sin(phase)


def background(mode: EngineMode, max_num_seqs: int) -> tuple[int, int]:
    """Simulated (running, waiting) that a mode puts on an engine, real requests excluded."""
    if mode is EngineMode.BUSY:
        return max_num_seqs, BUSY_WAITING
    if mode is EngineMode.STUCK:
        return max_num_seqs, STUCK_WAITING
    if mode is EngineMode.PREFILL:
        return 1, 0
    if mode in (EngineMode.DEFERRED, EngineMode.DEFERRED_HUNG):
        return 0, STUCK_WAITING
    return 0, 0


def admits(mode: EngineMode, max_num_seqs: int, queued_for: float, busy_queue_seconds: float) -> bool:
    """Whether a real request that has queued ``queued_for`` seconds gets a slot now.

    It gets one when the background load leaves a slot free; on a busy engine also after
    ``busy_queue_seconds`` (a background request finished). A hung engine never admits anything.
    """
    if mode in (EngineMode.HUNG, EngineMode.DEFERRED_HUNG):
        return False
    running, _ = background(mode, max_num_seqs)
    if running < max_num_seqs:
        return True
    return mode is EngineMode.BUSY and queued_for >= busy_queue_seconds


@dataclass
class EngineCounters:
    """The per-process counters of one engine; replaced wholesale by a restart."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    preemptions: float = 0.0
    success: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0.0))
    # Non-cumulative step counts per bucket of ITERATION_TOKENS_BUCKETS, the last one is +Inf.
    step_buckets: list[float] = field(default_factory=lambda: [0.0] * (len(ITERATION_TOKENS_BUCKETS) + 1))
    step_sum: float = 0.0
    kv_usage: float = 0.0

    @property
    def finished(self) -> float:
        """All finished requests, whatever the reason."""
        return sum(self.success.values())

    def observe_steps(self, steps: float, tokens_per_step: float) -> None:
        """Record ``steps`` engine steps of ``tokens_per_step`` tokens each in the iteration histogram."""
        if steps <= 0:
            return
        index = len(ITERATION_TOKENS_BUCKETS)
        for i, upper in enumerate(ITERATION_TOKENS_BUCKETS):
            if tokens_per_step <= upper:
                index = i
                break
        self.step_buckets[index] += steps
        self.step_sum += steps * tokens_per_step

    def advance(self, mode: EngineMode, dt: float, slots: int, kv_busy: float) -> None:
        """Credit ``dt`` seconds of work in ``mode``; ``slots`` is the background running count."""
        if mode is EngineMode.BUSY:
            generated = GENERATION_TOKENS_PER_SLOT_SECOND * slots * dt
            prompt = PROMPT_TOKENS_PER_ENGINE_SECOND * dt
            steps = STEPS_PER_SLOT_SECOND * slots * dt
            self.generation_tokens += generated
            self.prompt_tokens += prompt
            self.observe_steps(steps, (generated + prompt) / steps)
            self.success["stop"] += FINISHED_REQUESTS_PER_ENGINE_SECOND * dt
            self.kv_usage = kv_busy
        elif mode is EngineMode.PREFILL:
            grown = max(self.kv_usage, KV_PREFILL_START) + KV_PREFILL_GROWTH_PER_SECOND * dt
            self.kv_usage = min(KV_PREFILL_CAP, grown)
        elif mode in (EngineMode.STUCK, EngineMode.HUNG, EngineMode.DEFERRED, EngineMode.DEFERRED_HUNG):
            pass  # frozen: neither counters nor gauges move
        else:
            self.kv_usage = 0.0

    def settle(self, mode: EngineMode, kv_busy: float) -> None:
        """Give the engine a KV usage that fits a mode it just entered, not only after the next advance.

        A frozen engine keeps what it had, but a stuck one has work, and work present means some cache in use.
        """
        if mode is EngineMode.STUCK and self.kv_usage == 0.0:
            self.kv_usage = KV_STUCK
        elif mode is EngineMode.BUSY:
            self.kv_usage = kv_busy
        elif mode is EngineMode.PREFILL:
            self.kv_usage = max(self.kv_usage, KV_PREFILL_START)
        elif mode in (EngineMode.IDLE, EngineMode.SLEEPING):
            self.kv_usage = 0.0

    def serve(self, prompt_tokens: int, max_tokens: int) -> None:
        """Account one real completion: a prefill step, then one step per further token, finished by length."""
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += max_tokens
        self.observe_steps(1, prompt_tokens + 1)
        self.observe_steps(max_tokens - 1, 1)
        self.success["length"] += 1
