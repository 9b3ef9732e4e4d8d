"""The SGLang API server's own state, beside the engines: the tokenizer's pause flag and health status, and the
HTTP middleware's tallies. A restart (a new process start time) forgets it all, as a new process would.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Sequence

from .engine import EngineCounters
from .scenarios import EngineMode, Scenario
from .sglang_engine import SglangEngine, SglangOptions
from .sglang_page import SglangView

#: Engine modes whose scheduler sends output (or, fully idle, runs the health request): /health_generate passes.
ANSWERING: frozenset[EngineMode] = frozenset({
    EngineMode.IDLE, EngineMode.SLEEPING, EngineMode.DEFERRED, EngineMode.BUSY, EngineMode.PREFILL})
#: The warmup thread's calls (http_server._execute_server_warmup, _freeze_gc_after_server_warmup), in order.
_WARMUP_CALLS: tuple[tuple[str, str], ...] = (("/model_info", "GET"), ("/generate", "POST"), ("/freeze_gc", "POST"))


class SglangServer:
    """TokenizerManager's is_pause / server_status and the middleware's counts, behind their own lock."""

    def __init__(self, options: SglangOptions) -> None:
        self.options = options
        self._cond = threading.Condition()
        self._start_time: float | None = None
        self._paused = False
        self._healthy = True
        self._http: dict[tuple[str, str, str], int] = {}
        self._active: dict[tuple[str, str], int] = {}

    def _renew_locked(self, start_time: float) -> None:
        """A new process: not paused, Up once its warmup passed (counted by the middleware), no other traffic."""
        if self._start_time == start_time:
            return
        self._start_time = start_time
        self._paused = False
        self._healthy = True
        self._http.clear()
        self._active.clear()
        if not self.options.skip_server_warmup:
            for endpoint, method in _WARMUP_CALLS:
                self._http[(endpoint, method, "")] = 1
                self._http[(endpoint, method, "200")] = 1
                self._active[(endpoint, method)] = 0

    # --- the middleware ----------------------------------------------------------------------------------------

    def arrived(self, start_time: float, endpoint: str, method: str) -> None:
        with self._cond:
            self._renew_locked(start_time)
            key = (endpoint, method, "")
            self._http[key] = self._http.get(key, 0) + 1
            self._active[(endpoint, method)] = self._active.get((endpoint, method), 0) + 1

    def answered(self, start_time: float, endpoint: str, method: str, status: int | None) -> None:
        """The response went out (``status`` None: the connection was dropped, no response was counted)."""
        with self._cond:
            self._renew_locked(start_time)
            if status is not None:
                key = (endpoint, method, str(status))
                self._http[key] = self._http.get(key, 0) + 1
            if self._active.get((endpoint, method), 0) > 0:
                self._active[(endpoint, method)] -= 1

    # --- pause and health --------------------------------------------------------------------------------------

    def set_paused(self, start_time: float, paused: bool) -> None:
        with self._cond:
            self._renew_locked(start_time)
            self._paused = paused
            self._cond.notify_all()

    def ready(self, start_time: float) -> bool:
        """TokenizerManager.is_ready: not paused and healthy (a failed health check leaves it unhealthy)."""
        with self._cond:
            self._renew_locked(start_time)
            return not self._paused and self._healthy

    def healthy(self, start_time: float) -> bool:
        """TokenizerManager.is_healthy (SageMaker's /ping): paused or not."""
        with self._cond:
            self._renew_locked(start_time)
            return self._healthy

    def set_healthy(self, start_time: float, healthy: bool) -> None:
        with self._cond:
            self._renew_locked(start_time)
            self._healthy = healthy

    def is_paused(self) -> bool:
        with self._cond:
            return self._paused

    def wait_unpaused(self, until: Callable[[], bool], poll: float) -> bool:
        """Hold a generation while paused (generate_request waits on is_pause_cond); False if ``until`` says stop."""
        with self._cond:
            while self._paused:
                if until():
                    return False
                self._cond.wait(poll)
            return True

    # --- the page ----------------------------------------------------------------------------------------------

    def view(self, model: str, engines: Sequence[EngineCounters], start_time: float) -> SglangView:
        """One scrape's snapshot (called under the process lock, so the engines hold still)."""
        with self._cond:
            self._renew_locked(start_time)
            base = 1000 + zlib.crc32(repr(start_time).encode()) % 60000  # a new process, new scheduler pids
            return SglangView(
                model=model,
                engines=[engine for engine in engines if isinstance(engine, SglangEngine)],
                http=dict(self._http),
                active=dict(self._active),
                uptime=max(0.0, time.time() - start_time),
                pids=[base + 2 + index for index in range(len(engines))],
            )


def health_answer(engines: Sequence[EngineCounters], entry: Scenario) -> bool:
    """Whether a /health_generate request gets an output now; an idle engine 0 runs it as a one-token prefill."""
    mode = entry.mode(0)
    if mode not in ANSWERING:
        return False
    engine = engines[0]
    if mode in (EngineMode.IDLE, EngineMode.SLEEPING) and isinstance(engine, SglangEngine):
        engine.health_prefill()  # fully idle: the scheduler runs it (busy: skipped, outputs already flow)
    return True


def any_stuck(entry: Scenario, engines: int) -> bool:
    """A scheduler frozen with a batch active: the watchdog's case (forward_ct still, cur_batch_for_debug set)."""
    return any(entry.mode(index) is EngineMode.STUCK for index in range(engines))


class Watchdog:
    """The scheduler's watchdog (utils/watchdog.py WatchdogRaw): with a batch active and forward_ct still for
    ``timeout`` seconds it SIGQUITs the server, whose handler kills the whole process tree.

    SGLang looks every timeout/2 s and waits 5 s before the signal, so a real one fires between ``timeout`` and
    ``1.5 * timeout + 5`` s after the last forward pass; the simulator fires at ``timeout``.
    """

    def __init__(self, timeout: float, fire: Callable[[int], None]) -> None:
        self._timeout = timeout
        self._fire = fire
        self._timer: threading.Timer | None = None

    def arm(self, stuck: bool, generation: int) -> None:
        """Cancel the countdown, and start a new one if a scheduler is stuck; ``fire(generation)`` when it ends."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if stuck:
            self._timer = threading.Timer(self._timeout, self._fire, args=(generation,))
            self._timer.daemon = True
            self._timer.start()
