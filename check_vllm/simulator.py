"""A vLLM look-alike HTTP server for tests and demos.

check_vllm has to tell a busy vLLM server from a stuck one, and the only honest way to test that is against
something that behaves like vLLM on the wire: a real TCP socket, a Prometheus page with vLLM's metric names
rendered by prometheus_client (the same library the check parses with), a slot limit so that an inference
probe really waits in the queue behind background work, and counters that move (or do not) the way they do
on a real engine. Scenarios switch that behaviour at run time, in process (``Simulator.set_scenario``) or over
HTTP (``POST /_sim/scenario``) when the simulator runs as a subprocess (``vllm-simulator`` /
``python -m check_vllm.simulator``).

Counters advance lazily: every read of ``/metrics`` and every state change first credits each engine with the
work it would have done since the previous advance, at fixed rates, under the scenario that was in force. That
keeps the simulator free of background threads and makes "how much moved in 0.2 s" predictable for tests.

Nothing here is meant for production; it only depends on the standard library and prometheus_client.
"""

from __future__ import annotations

import argparse
import enum
import json
import math
import select
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, MappingProxyType, TracebackType
from typing import Any, Final, cast
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = [
    "SCENARIOS",
    "RecordedRequest",
    "Simulator",
    "main",
]

#: Every scenario name the simulator understands, in the order the CLI lists them.
SCENARIOS: Final[tuple[str, ...]] = (
    "idle",
    "busy",
    "long_prefill",
    "stuck",
    "hung_idle",
    "restarted",
    "dp_one_frozen",
    "multiprocess",
    "no_metrics",
    "html",
    "http_500",
    "http_502",
    "sleeping",
    "slow",
    "dead",
)

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

MAX_MODEL_LEN: Final = 2048
DEFAULT_MAX_TOKENS: Final = 16
DEFAULT_BUSY_QUEUE_SECONDS: Final = 30.0
_MAX_BODY_BYTES: Final = 1 << 20
_WAIT_SLICE_SECONDS: Final = 0.05

# --- bucket layouts (as in vLLM's metrics.py) ----------------------------------------------------------------
ITERATION_TOKENS_BUCKETS: Final[tuple[float, ...]] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
)
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
_HTTP_HIGHR_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0,
    30.0, 60.0,
)
_HTTP_BUCKETS: Final[tuple[float, ...]] = (0.1, 0.5, 1.0)

FINISHED_REASONS: Final[tuple[str, ...]] = ("stop", "length", "abort")
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

_HTML_ERROR_PAGE: Final = (
    b"<html><body><h1>502 Bad Gateway</h1>\n"
    b"<p>The server returned an invalid or incomplete response.</p>\n"
    b"<hr><center>nginx</center></body></html>\n"
)
_METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_INFERENCE_PATHS: Final = frozenset({"/v1/completions", "/v1/chat/completions"})
_KNOWN_ROUTES: Final[Mapping[str, str]] = MappingProxyType({
    "/metrics": "GET",
    "/health": "GET",
    "/v1/models": "GET",
    "/v1/completions": "POST",
    "/v1/chat/completions": "POST",
})


class _Mode(enum.Enum):
    """What one engine is doing; scenarios map to a mode per engine."""

    IDLE = "idle"
    BUSY = "busy"
    PREFILL = "prefill"
    STUCK = "stuck"
    HUNG = "hung"  # frozen with no work: metrics say idle, a completion never gets an answer
    SLEEPING = "sleeping"


class _Outcome(enum.Enum):
    """How a queued inference request ended, for the HTTP layer to turn into a response."""

    SERVED = "served"
    SLEEPING = "sleeping"
    DROP = "drop"  # server dead or stopped: close the connection without an answer
    GONE = "gone"  # the client hung up while waiting


@dataclass(frozen=True)
class RecordedRequest:
    """One request the simulator received (control calls under ``/_sim/`` are not recorded).

    ``at`` is wall-clock time (``time.time()``) so that it can be compared across processes.
    ``path`` is the URL path without the query string.
    """

    method: str
    path: str
    at: float


@dataclass
class _EngineCounters:
    """The per-process counters of one engine; replaced wholesale by a restart."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    preemptions: float = 0.0
    success: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0.0))
    # Non-cumulative step counts per bucket of ITERATION_TOKENS_BUCKETS, the last one is +Inf.
    step_buckets: list[float] = field(default_factory=lambda: [0.0] * (len(ITERATION_TOKENS_BUCKETS) + 1))
    step_sum: float = 0.0
    kv_usage: float = 0.0

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

    @property
    def finished(self) -> float:
        """All finished requests, whatever the reason."""
        return sum(self.success.values())


@dataclass(frozen=True)
class _Usage:
    """Token accounting of one served completion."""

    prompt_tokens: int
    completion_tokens: int


def _cumulative_profile(count: float, buckets: Sequence[float]) -> list[tuple[str, float]]:
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


def _count_prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    """Whitespace-split token count of the prompt (or chat messages), at least 1."""
    texts: list[str] = []
    ids = 0
    if chat:
        messages = body.get("messages")
        if isinstance(messages, list):
            for message in messages:
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, str):
                    texts.append(content)
                elif isinstance(content, list):
                    texts.extend(
                        str(part.get("text", "")) for part in content if isinstance(part, dict)
                    )
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            texts.append(prompt)
        elif isinstance(prompt, list):
            for item in prompt:
                if isinstance(item, str):
                    texts.append(item)
                elif isinstance(item, int):
                    ids += 1
                elif isinstance(item, list):
                    ids += len(item)
    words = sum(len(text.split()) for text in texts)
    return max(1, words + ids)


class _MetricsCollector:
    """prometheus_client collector that asks the simulator for a consistent snapshot on every scrape."""

    def __init__(self, render: Callable[[], list[Metric]]) -> None:
        self._render = render

    def collect(self) -> Iterable[Metric]:
        return self._render()

    def describe(self) -> Iterable[Metric]:
        """Declare no names: the family set changes with the variant, and the registry holds only us."""
        return []


class Simulator:
    """A vLLM look-alike server on loopback; see the module docstring for why it exists.

    All state lives on the instance and is guarded by one condition variable, so any number of simulators can
    run in one test process. ``start()`` binds (port 0 picks a free port) and serves from a daemon thread.
    """

    def __init__(
        self,
        scenario: str = "idle",
        engines: int = 1,
        max_num_seqs: int = 2,
        legacy: bool = False,
        multiprocess: bool = False,
        model: str = "tiny-llama",
        slow_seconds: float = 10.0,
        host: str = "127.0.0.1",
        port: int = 0,
        busy_queue_seconds: float = DEFAULT_BUSY_QUEUE_SECONDS,
    ) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        if engines < 1:
            raise ValueError("engines must be >= 1")
        if max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if legacy and (engines > 1 or scenario == "dp_one_frozen"):
            raise ValueError("legacy (V0) metrics have no engine label, so only one engine can be simulated")
        self.model = model
        self.max_num_seqs = max_num_seqs
        self.legacy = legacy
        self.slow_seconds = slow_seconds
        self.busy_queue_seconds = busy_queue_seconds
        self.host = host
        self._multiprocess_flag = multiprocess
        self._port = port

        self._cond = threading.Condition()
        self._life = threading.RLock()  # server open/close and the scenario timer; taken before _cond
        now = time.monotonic()
        self._origin = now
        self._last_advance = now
        self._scenario = scenario
        self._scenario_since = now
        self._start_time = time.time()
        self._engines = [_EngineCounters() for _ in range(engines)]
        self._http_counts: dict[tuple[str, str, str], list[float]] = {}  # key -> [count, created]
        self._requests: list[RecordedRequest] = []
        self._real_waiting = 0
        self._stopping = False
        self._started = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._generation = 0  # bumps on every set_scenario so a stale timer does nothing

        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_MetricsCollector(self._metric_families))
        with self._cond:
            self._enter_locked(scenario, restart=False)

    # --- public API --------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port (the real one after ``start()`` when 0 was asked for)."""
        return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def scenario(self) -> str:
        """The scenario in force."""
        with self._cond:
            return self._scenario

    @property
    def engines(self) -> int:
        """Number of simulated engines (dp_one_frozen raises it to at least 2, and it stays there)."""
        with self._cond:
            return len(self._engines)

    @property
    def process_start_time(self) -> float:
        """Wall-clock start of the simulated process, as served in ``process_start_time_seconds``."""
        with self._cond:
            return self._start_time

    def start(self) -> Simulator:
        """Bind and serve in a daemon thread; in scenario ``dead`` the port is bound once, then closed."""
        with self._life:
            if self._started:
                raise RuntimeError("simulator already started")
            self._started = True
            self._stopping = False
            self._open_listener()
            if self.scenario == "dead":
                self._close_listener()
        return self

    def stop(self) -> None:
        """Close the listener and every open connection, and release requests waiting for a slot."""
        with self._life:
            self._cancel_timer()
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._close_listener()
            self._started = False

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def set_scenario(self, name: str, *, seconds: float | None = None, then: str = "idle") -> None:
        """Switch scenario now (thread-safe); with ``seconds``, switch to ``then`` after that long.

        The timed form exists for subprocess tests: a simulator made ``dead`` over HTTP cannot be reached to
        bring it back, so it brings itself back.
        """
        self._set_scenario(name, seconds=seconds, then=then)

    def _set_scenario(
        self, name: str, *, seconds: float | None, then: str, keep: socket.socket | None = None
    ) -> None:
        """set_scenario, sparing connection ``keep`` when going dead (the control call that asked for it)."""
        for candidate in (name, then):
            if candidate not in SCENARIOS:
                raise ValueError(f"unknown scenario {candidate!r}; known: {', '.join(SCENARIOS)}")
            if self.legacy and candidate == "dp_one_frozen":
                raise ValueError("dp_one_frozen needs engine labels, which legacy (V0) metrics do not have")
        with self._life:
            self._cancel_timer()
            self._generation += 1
            with self._cond:
                old = self._scenario
                self._advance_locked(time.monotonic())
                self._enter_locked(name, restart=(old == "dead" and name != "dead"))
                self._cond.notify_all()
            if self._started and not self._stopping:
                if name == "dead" and old != "dead":
                    self._close_listener(keep=keep)
                elif old == "dead" and name != "dead":
                    self._open_listener()
            if seconds is not None:
                timer = threading.Timer(seconds, self._timed_switch, args=(self._generation, then))
                timer.daemon = True
                self._timer = timer
                timer.start()

    def restart(self) -> None:
        """Simulate a process restart: new start time, new ``_created`` values, every counter back to 0."""
        with self._cond:
            self._advance_locked(time.monotonic())
            self._restart_locked()
            self._cond.notify_all()

    def requests(self) -> list[RecordedRequest]:
        """A copy of the request log, oldest first."""
        with self._cond:
            return list(self._requests)

    def inference_requests(self) -> list[RecordedRequest]:
        """Only the POSTs to the completion endpoints: what a check must not send while the server is busy."""
        return [r for r in self.requests() if r.method == "POST" and r.path in _INFERENCE_PATHS]

    def clear_requests(self) -> None:
        """Forget the request log."""
        with self._cond:
            self._requests.clear()

    def metrics_text(self) -> bytes:
        """The ``/metrics`` page as it would be served now (Prometheus text 0.0.4)."""
        return generate_latest(self._registry)

    # --- scenario mechanics (call with _cond held) -------------------------------------------------------------

    def _enter_locked(self, name: str, *, restart: bool) -> None:
        now = time.monotonic()
        self._scenario = name
        self._scenario_since = now
        if name == "dp_one_frozen":
            while len(self._engines) < 2:
                self._engines.append(_EngineCounters())
        if name == "restarted" or restart:
            self._restart_locked()
        self._settle_kv_locked(now)

    def _restart_locked(self) -> None:
        self._start_time = max(time.time(), self._start_time + 0.001)
        self._engines = [_EngineCounters() for _ in self._engines]
        self._http_counts.clear()
        self._settle_kv_locked(time.monotonic())

    def _settle_kv_locked(self, now: float) -> None:
        """Give each engine a KV usage that fits its new mode at once, not only after the next advance.

        A stuck engine keeps what it had (it is frozen), but work present means some cache is in use.
        """
        for index, engine in enumerate(self._engines):
            mode = self._mode(index)
            if mode is _Mode.STUCK and engine.kv_usage == 0.0:
                engine.kv_usage = KV_STUCK
            elif mode is _Mode.BUSY:
                engine.kv_usage = self._busy_kv(now)
            elif mode is _Mode.PREFILL:
                engine.kv_usage = max(engine.kv_usage, KV_PREFILL_START)
            elif mode in (_Mode.IDLE, _Mode.SLEEPING):
                engine.kv_usage = 0.0

    def _mode(self, engine: int) -> _Mode:
        scenario = self._scenario
        if scenario in ("busy", "multiprocess"):
            return _Mode.BUSY
        if scenario == "dp_one_frozen":
            return _Mode.STUCK if engine == 1 else _Mode.BUSY
        if scenario == "long_prefill":
            return _Mode.PREFILL
        if scenario == "stuck":
            return _Mode.STUCK
        if scenario == "hung_idle":
            return _Mode.HUNG
        if scenario == "sleeping":
            return _Mode.SLEEPING
        return _Mode.IDLE

    def _background(self, engine: int) -> tuple[int, int]:
        """Simulated (running, waiting) that the scenario puts on an engine, real requests excluded."""
        mode = self._mode(engine)
        if mode is _Mode.BUSY:
            return self.max_num_seqs, BUSY_WAITING
        if mode is _Mode.STUCK:
            return self.max_num_seqs, STUCK_WAITING
        if mode is _Mode.PREFILL:
            return 1, 0
        return 0, 0

    def _busy_kv(self, now: float) -> float:
        phase = 2.0 * math.pi * (now - self._origin) / KV_BUSY_PERIOD_SECONDS
        return KV_BUSY_CENTRE + KV_BUSY_AMPLITUDE * math.sin(phase)

    def _advance_locked(self, now: float) -> None:
        """Credit every engine with the work of the time since the last advance, under the current scenario."""
        dt = now - self._last_advance
        if dt <= 0:
            return
        self._last_advance = now
        for index, engine in enumerate(self._engines):
            mode = self._mode(index)
            if mode is _Mode.BUSY:
                slots = float(self._background(index)[0])
                generated = GENERATION_TOKENS_PER_SLOT_SECOND * slots * dt
                prompt = PROMPT_TOKENS_PER_ENGINE_SECOND * dt
                steps = STEPS_PER_SLOT_SECOND * slots * dt
                engine.generation_tokens += generated
                engine.prompt_tokens += prompt
                engine.observe_steps(steps, (generated + prompt) / steps)
                engine.success["stop"] += FINISHED_REQUESTS_PER_ENGINE_SECOND * dt
                engine.kv_usage = self._busy_kv(now)
            elif mode is _Mode.PREFILL:
                grown = max(engine.kv_usage, KV_PREFILL_START) + KV_PREFILL_GROWTH_PER_SECOND * dt
                engine.kv_usage = min(KV_PREFILL_CAP, grown)
            elif mode in (_Mode.STUCK, _Mode.HUNG):
                pass  # frozen: neither counters nor gauges move
            else:
                engine.kv_usage = 0.0

    def _timed_switch(self, generation: int, then: str) -> None:
        with self._life:
            if generation == self._generation and not self._stopping:
                self.set_scenario(then)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- listener lifecycle (call with _life held) -------------------------------------------------------------

    def _open_listener(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server = _Server((self.host, self._port), _Handler, simulator=self, family=family)
        self._port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _WAIT_SLICE_SECONDS},
            name=f"vllm-simulator:{self._port}",
            daemon=True,
        )
        self._server = server
        self._thread = thread
        thread.start()

    def _close_listener(self, keep: socket.socket | None = None) -> None:
        server, thread = self._server, self._thread
        self._server = None
        self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.drop_connections(keep=keep)
        if thread is not None:
            thread.join(timeout=5.0)

    # --- called by the HTTP handler ----------------------------------------------------------------------------

    def _record(self, method: str, path: str) -> None:
        with self._cond:
            self._requests.append(RecordedRequest(method=method, path=path, at=time.time()))

    def _count_http(self, handler: str, method: str, status: int) -> None:
        key = (handler, method, f"{status // 100}xx")
        with self._cond:
            entry = self._http_counts.setdefault(key, [0.0, time.time()])
            entry[0] += 1.0

    def _slow_wait(self) -> bool:
        """Hold a ``/metrics`` answer for ``slow_seconds``; False if the server died or stopped meanwhile."""
        with self._cond:
            gone = self._cond.wait_for(
                lambda: self._stopping or self._scenario == "dead", timeout=self.slow_seconds
            )
            return not gone

    def _is_dead(self) -> bool:
        with self._cond:
            return self._scenario == "dead" or self._stopping

    def _complete(self, prompt_tokens: int, max_tokens: int, client_gone: Callable[[], bool]) -> _Outcome:
        """Wait for a slot on engine 0 like vLLM's scheduler would, then serve the request at once.

        The request counts as waiting while it queues. It is admitted when the background load leaves a slot
        free; in ``busy`` it also gets one after ``busy_queue_seconds`` in the queue (a background request
        finished), in ``stuck`` never. A client that hangs up leaves the queue, as vLLM aborts it.
        """
        with self._cond:
            enqueued = time.monotonic()
            self._real_waiting += 1
            try:
                while True:
                    if self._stopping or self._scenario == "dead":
                        return _Outcome.DROP
                    mode = self._mode(0)
                    if mode is _Mode.SLEEPING:
                        return _Outcome.SLEEPING
                    now = time.monotonic()
                    running, _ = self._background(0)
                    admitted = mode is not _Mode.HUNG and running < self.max_num_seqs or (
                        mode is _Mode.BUSY
                        and now - max(enqueued, self._scenario_since) >= self.busy_queue_seconds
                    )
                    if admitted:
                        self._advance_locked(now)
                        engine = self._engines[0]
                        engine.prompt_tokens += prompt_tokens
                        engine.generation_tokens += max_tokens
                        engine.observe_steps(1, prompt_tokens + 1)
                        engine.observe_steps(max_tokens - 1, 1)
                        engine.success["length"] += 1
                        return _Outcome.SERVED
                    self._cond.wait(_WAIT_SLICE_SECONDS)
                    if client_gone():
                        return _Outcome.GONE
            finally:
                self._real_waiting -= 1

    # --- /metrics rendering --------------------------------------------------------------------------------------

    def _metric_families(self) -> list[Metric]:
        """Build every family from one consistent snapshot (called by the collector on each scrape)."""
        with self._cond:
            self._advance_locked(time.monotonic())
            multiprocess = self._multiprocess_flag or self._scenario == "multiprocess"
            created = None if multiprocess else self._start_time
            families: list[Metric] = []
            families.extend(self._vllm_families(created))
            families.extend(self._http_families(multiprocess))
            if not multiprocess:
                families.extend(self._runtime_families())
            return families

    def _labels(self, engine: int) -> tuple[list[str], list[str]]:
        if self.legacy:
            return ["model_name"], [self.model]
        return ["engine", "model_name"], [str(engine), self.model]

    def _vllm_families(self, created: float | None) -> list[Metric]:
        names, _ = self._labels(0)
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels=names
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels=names
        )
        if self.legacy:
            kv = GaugeMetricFamily(
                "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", labels=names
            )
        else:
            kv = GaugeMetricFamily(
                "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels=names
            )
        sleep = GaugeMetricFamily(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            labels=[*names, "sleep_state"],
        )
        cache_info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[*names, "block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                    "num_gpu_blocks", "swap_space_bytes"],
        )
        preemptions = CounterMetricFamily(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels=names
        )
        prompt = CounterMetricFamily(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels=names
        )
        generation = CounterMetricFamily(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels=names
        )
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        prefix_queries = CounterMetricFamily(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", labels=names,
        )
        prefix_hits = CounterMetricFamily(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels=names
        )
        iteration = HistogramMetricFamily(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", labels=names
        )
        fillers = [
            (HistogramMetricFamily(name, doc, labels=names), buckets, source, mean)
            for name, doc, buckets, source, mean in _FILLER_HISTOGRAMS
        ]

        for index, engine in enumerate(self._engines):
            _, values = self._labels(index)
            bg_running, bg_waiting = self._background(index)
            real_waiting = self._real_waiting if index == 0 else 0
            running.add_metric(values, float(bg_running))
            waiting.add_metric(values, float(bg_waiting + real_waiting))
            kv.add_metric(values, engine.kv_usage)
            asleep = self._mode(index) is _Mode.SLEEPING
            states = {"awake": not asleep, "weights_offloaded": asleep, "discard_all": False}
            for state in SLEEP_STATES:
                sleep.add_metric([*values, state], 1.0 if states[state] else 0.0)
            cache_info.add_metric([*values, "16", "auto", "True", "0.9", "4096", "0"], 1.0)
            preemptions.add_metric(values, engine.preemptions, created=created)
            prompt.add_metric(values, engine.prompt_tokens, created=created)
            generation.add_metric(values, engine.generation_tokens, created=created)
            for reason in FINISHED_REASONS:
                success.add_metric([*values, reason], engine.success[reason], created=created)
            prefix_queries.add_metric(values, engine.prompt_tokens, created=created)
            prefix_hits.add_metric(values, math.floor(engine.prompt_tokens * 0.25), created=created)

            cumulative = 0.0
            rows: list[tuple[str, float]] = []
            for upper, count in zip((*ITERATION_TOKENS_BUCKETS, math.inf), engine.step_buckets, strict=True):
                cumulative += count
                rows.append((floatToGoString(upper), cumulative))
            iteration.add_metric(values, rows, engine.step_sum)
            _add_created(iteration, values, names, created)

            finished = engine.finished
            for family, buckets, source, mean in fillers:
                if source == "prompt":
                    total = engine.prompt_tokens
                elif source == "generation":
                    total = engine.generation_tokens
                else:
                    total = finished * mean
                family.add_metric(values, _cumulative_profile(finished, buckets), total)
                _add_created(family, values, names, created)

        families: list[Metric] = [running, waiting, kv]
        if self.legacy:
            swapped = GaugeMetricFamily(
                "vllm:num_requests_swapped", "Number of requests swapped to CPU.", labels=names
            )
            swapped.add_metric([self.model], 0.0)
            cpu_kv = GaugeMetricFamily(
                "vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", labels=names
            )
            cpu_kv.add_metric([self.model], 0.0)
            families.extend([swapped, cpu_kv])
        else:
            families.extend([sleep, prefix_queries, prefix_hits])
        families.extend([cache_info, preemptions, prompt, generation, success, iteration])
        families.extend(family for family, _, _, _ in fillers)
        return families

    def _http_families(self, multiprocess: bool) -> list[Metric]:
        """fastapi-instrumentator style series, as vLLM's API server exposes them."""
        requests = CounterMetricFamily(
            "http_requests", "Total number of requests by method, status and handler.",
            labels=["handler", "method", "status"],
        )
        highr = HistogramMetricFamily(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile "
            "calculations. ",
        )
        duration = HistogramMetricFamily(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is "
            "important. ",
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
        for (handler, method, status), (count, created) in sorted(self._http_counts.items()):
            requests.add_metric([handler, method, status], count, created=None if multiprocess else created)
            total += count
            per_handler[(handler, method)] = per_handler.get((handler, method), 0.0) + count
        highr.add_metric([], _cumulative_profile(total, _HTTP_HIGHR_BUCKETS), total * 0.01)
        handlers: dict[str, float] = {}
        for (handler, method), count in sorted(per_handler.items()):
            duration.add_metric([handler, method], _cumulative_profile(count, _HTTP_BUCKETS), count * 0.01)
            handlers[handler] = handlers.get(handler, 0.0) + count
        for handler, count in sorted(handlers.items()):
            request_size.add_metric([handler], int(count), count * 64.0)
            response_size.add_metric([handler], int(count), count * 2048.0)
        return [requests, highr, duration, request_size, response_size]

    def _runtime_families(self) -> list[Metric]:
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
        uptime = max(0.0, time.time() - self._start_time)
        process = [
            GaugeMetricFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", 3.2e10),
            GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.", 2.1e9),
            GaugeMetricFamily(
                "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                self._start_time,
            ),
            CounterMetricFamily(
                "process_cpu_seconds", "Total user and system CPU time spent in seconds.", uptime * 0.1
            ),
            GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", 96.0),
            GaugeMetricFamily("process_max_fds", "Maximum number of open file descriptors.", 1048576.0),
        ]
        return [collected, uncollectable, collections, info, *process]


def _add_created(family: Metric, values: list[str], names: list[str], created: float | None) -> None:
    """Append a ``_created`` sample to a histogram series, as prometheus_client's Histogram does."""
    if created is not None:
        family.samples.append(Sample(family.name + "_created", dict(zip(names, values, strict=True)), created))


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its simulator and its open connections (so ``dead`` can cut them)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        simulator: Simulator,
        family: socket.AddressFamily,
    ) -> None:
        self.address_family = family
        self.simulator = simulator
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def drop_connections(self, keep: socket.socket | None = None) -> None:
        """Shut down every accepted connection but ``keep``, as a dying process would: clients see them close."""
        with self._connections_lock:
            connections = [c for c in self._connections if c is not keep]
            self._connections.clear()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about clients that hang up; report anything else as socketserver would."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """HTTP front end: routes like vLLM's OpenAI server plus the ``/_sim/`` control endpoints."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def _server(self) -> _Server:
        return cast(_Server, self.server)

    @property
    def _sim(self) -> Simulator:
        return self._server.simulator

    def setup(self) -> None:
        super().setup()
        self._server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except (ConnectionError, TimeoutError, OSError):
            pass
        finally:
            self._server.untrack(self.connection)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log; tests read the request log instead."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # --- plumbing ----------------------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks: list[bytes] = []
            size = 0
            while True:
                line = self.rfile.readline(64)
                length = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if length == 0:
                    self.rfile.readline(64)
                    return b"".join(chunks)
                size += length
                if size > _MAX_BODY_BYTES:
                    raise ValueError("request body too large")
                chunks.append(self.rfile.read(length))
                self.rfile.readline(64)
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY_BYTES:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes, content_type: str, *, handler: str | None = None) -> None:
        """Write a complete response; ``handler`` labels it in http_requests_total (None: not counted)."""
        if handler is not None:
            self._sim._count_http(handler, self.command, status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, payload: Any, *, handler: str | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", handler=handler)

    def _openai_error(self, status: int, kind: str, message: str, handler: str) -> None:
        error = {"message": message, "type": kind, "param": None, "code": status}
        payload = {"object": "error", **error} if self._sim.legacy else {"error": error}
        self._send_json(status, payload, handler=handler)

    def _client_gone(self) -> bool:
        """True when the peer closed its end (readable with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _drop(self) -> None:
        """Answer nothing and close, like a process that died with the request in flight."""
        self.close_connection = True

    # --- routing -----------------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            self._send_json(413, {"detail": "Request Entity Too Large"})
            return
        if path.startswith("/_sim/"):
            self._control(path, body)
            return
        sim = self._sim
        sim._record(self.command, path)
        if sim._is_dead():
            self._drop()
            return
        expected = _KNOWN_ROUTES.get(path)
        if expected is None:
            self._send_json(404, {"detail": "Not Found"}, handler="none")
        elif expected != self.command:
            self._send_json(405, {"detail": "Method Not Allowed"}, handler=path)
        elif path == "/metrics":
            self._metrics()
        elif path == "/health":
            self._send(200, b"", "application/json", handler=path)
        elif path == "/v1/models":
            self._send_json(200, {
                "object": "list",
                "data": [{
                    "id": sim.model,
                    "object": "model",
                    "created": int(sim.process_start_time),
                    "owned_by": "vllm",
                    "root": sim.model,
                    "parent": None,
                    "max_model_len": MAX_MODEL_LEN,
                }],
            }, handler=path)
        else:
            self._completion(path, body)

    def _metrics(self) -> None:
        sim = self._sim
        scenario = sim.scenario
        if scenario == "no_metrics":
            self._send_json(404, {"detail": "Not Found"}, handler="none")
        elif scenario == "html":
            self._send(200, _HTML_ERROR_PAGE, "text/html", handler="/metrics")
        elif scenario == "http_500":
            self._send(500, b"Internal Server Error", "text/plain; charset=utf-8", handler="/metrics")
        elif scenario == "http_502":
            self._send(502, _HTML_ERROR_PAGE, "text/html", handler="/metrics")
        else:
            if scenario == "slow" and not sim._slow_wait():
                self._drop()
                return
            self._send(200, sim.metrics_text(), _METRICS_CONTENT_TYPE, handler="/metrics")

    def _completion(self, path: str, raw: bytes) -> None:
        sim = self._sim
        chat = path == "/v1/chat/completions"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._openai_error(400, "BadRequestError", "Request body is not valid JSON.", path)
            return
        if not isinstance(body, dict):
            self._openai_error(400, "BadRequestError", "Request body must be a JSON object.", path)
            return
        model = body.get("model")
        if model is not None and model != sim.model:
            self._openai_error(404, "NotFoundError", f"The model `{model}` does not exist.", path)
            return
        max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            self._openai_error(400, "BadRequestError", "max_tokens must be at least 1.", path)
            return
        prompt_tokens = _count_prompt_tokens(body, chat)
        outcome = sim._complete(prompt_tokens, max_tokens, self._client_gone)
        if outcome is _Outcome.SLEEPING:
            self._openai_error(400, "BadRequestError", "The engine is sleeping; wake it up first.", path)
            return
        if outcome is not _Outcome.SERVED:
            self._drop()
            return
        text = " ok" * max_tokens
        created = int(time.time())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens,
            "total_tokens": prompt_tokens + max_tokens,
        }
        payload: dict[str, Any]
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
            payload = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion"}
        else:
            choice["text"] = text
            payload = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion"}
        payload.update({"created": created, "model": sim.model, "choices": [choice], "usage": usage})
        self._send_json(200, payload, handler=path)

    def _control(self, path: str, raw: bytes) -> None:
        """``/_sim/*``: steer the simulator from another process. Never recorded, never counted."""
        sim = self._sim
        if path == "/_sim/requests" and self.command == "GET":
            log = [{"method": r.method, "path": r.path, "at": r.at} for r in sim.requests()]
            self._send_json(200, log)
        elif path == "/_sim/scenario" and self.command == "GET":
            self._send_json(200, {"scenario": sim.scenario})
        elif path == "/_sim/scenario" and self.command == "POST":
            self._set_scenario(raw)
        elif path == "/_sim/restart" and self.command == "POST":
            sim.restart()
            self._send_json(200, {"restarted": True, "process_start_time_seconds": sim.process_start_time})
        elif path == "/_sim/clear" and self.command == "POST":
            sim.clear_requests()
            self._send_json(200, {"cleared": True})
        else:
            self._send_json(404, {"detail": "Not Found"})

    def _set_scenario(self, raw: bytes) -> None:
        sim = self._sim
        try:
            body = json.loads(raw or b"{}")
            name = body["scenario"]
            seconds = body.get("seconds")
            then = body.get("then", "idle")
            if not isinstance(name, str) or not isinstance(then, str):
                raise TypeError("scenario must be a string")
            if seconds is not None:
                seconds = float(seconds)
            for candidate in (name, then):
                if candidate not in SCENARIOS:
                    raise ValueError(f"unknown scenario {candidate!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._send_json(400, {"error": str(exc), "scenarios": list(SCENARIOS)})
            return
        if name == "dead":
            # The listener is closed before we answer, so a client that reconnects right after the answer is
            # refused; this connection is spared and closed after the answer.
            self.close_connection = True
        try:
            sim._set_scenario(name, seconds=seconds, then=then, keep=self.connection)
        except ValueError as exc:
            self._send_json(400, {"error": str(exc), "scenarios": list(SCENARIOS)})
            return
        self._send_json(200, {"scenario": name})


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="vllm-simulator",
        description="A vLLM look-alike server (metrics, models, completions) for testing check_vllm.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    parser.add_argument("--scenario", default="idle", choices=SCENARIOS)
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines (default 1)")
    parser.add_argument("--max-num-seqs", type=int, default=2, help="request slots per engine (default 2)")
    parser.add_argument("--legacy", action="store_true", help="vLLM 0.6-0.9 (V0) metric names, no engine label")
    parser.add_argument("--multiprocess", action="store_true",
                        help="prometheus multiprocess mode: no process_* metrics, no _created samples")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--slow-seconds", type=float, default=10.0,
                        help="delay of /metrics in scenario slow (default 10)")
    parser.add_argument("--busy-queue-seconds", type=float, default=DEFAULT_BUSY_QUEUE_SECONDS,
                        help="how long a real request queues in scenario busy before it is served (default 30)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``vllm-simulator``: serve until SIGTERM or SIGINT, then exit 0."""
    args = _parse_args(argv)
    try:
        sim = Simulator(
            scenario=args.scenario,
            engines=args.engines,
            max_num_seqs=args.max_num_seqs,
            legacy=args.legacy,
            multiprocess=args.multiprocess,
            model=args.model,
            slow_seconds=args.slow_seconds,
            host=args.host,
            port=args.port,
            busy_queue_seconds=args.busy_queue_seconds,
        )
        sim.start()
    except (ValueError, OSError) as exc:
        print(f"vllm-simulator: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    print(f"vllm-simulator listening on {sim.url} scenario={sim.scenario}", flush=True)
    while not done.wait(0.5):
        pass
    sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
