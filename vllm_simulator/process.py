"""The simulated vLLM process: everything that lives behind the simulator's one lock.

Its engines and their counters, the scenario entry in force, the start time a restart renews, the HTTP request
counters, the queue of real requests and the request log. Every method takes the lock itself, so the HTTP
threads, the scenario timer and the test thread can all call in; none of them blocks another for long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.core import Metric

from .engine import EngineCounters, Outcome, admits, background, busy_kv
from .page import PageView, render
from .scenarios import EngineMode, Scenario
from .vllm_families import EngineView

T = TypeVar("T")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the simulator received (control calls under ``/_sim/`` are not recorded).

    ``at`` is wall-clock time (``time.time()``) so that it can be compared across processes.
    ``path`` is the URL path without the query string.
    """

    method: str
    path: str
    at: float


class SimulatedProcess:
    """The state of one simulated server process and how it moves; see the module docstring."""

    def __init__(self, entry: Scenario, engines: int, max_num_seqs: int, busy_queue_seconds: float,
                 engine_factory: Callable[[], EngineCounters] = EngineCounters) -> None:
        self.max_num_seqs = max_num_seqs
        self._new_engine = engine_factory  # another flavour's engine (sglang_engine) counts its own series too
        self.busy_queue_seconds = busy_queue_seconds
        self._cond = threading.Condition()
        now = time.monotonic()
        self._origin = now
        self._last_advance = now
        self._entry = entry
        self._since = now  # when the entry in force was entered
        self._start_time = time.time()
        self._engines = [engine_factory() for _ in range(engines)]
        self._http_counts: dict[tuple[str, str, str], tuple[float, float]] = {}  # key -> (count, created)
        self._requests: list[RecordedRequest] = []
        self._real_waiting: dict[int, int] = {}  # engine -> real requests queued for a slot
        self._stopping = False
        with self._cond:
            self._enter_locked(entry, restart=False)

    # --- reads -------------------------------------------------------------------------------------------------

    def entry(self) -> Scenario:
        with self._cond:
            return self._entry

    def engine_count(self) -> int:
        with self._cond:
            return len(self._engines)

    def start_time(self) -> float:
        with self._cond:
            return self._start_time

    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    def entered(self) -> float:
        """When (``time.monotonic()``) the entry in force was entered: the work of the one before ended then."""
        with self._cond:
            return self._since

    def renew_engine(self, index: int) -> None:
        """Engine ``index`` as a new process (a router's child just loaded): its counters made anew."""
        with self._cond:
            self._advance_locked(time.monotonic())
            self._engines[index] = self._new_engine()

    def load(self, index: int = 0) -> tuple[int, int]:
        """(running, waiting) on engine ``index`` now, real requests queued for a slot included."""
        with self._cond:
            view = self._engine_view_locked(index)
            return view.running, view.waiting

    @property
    def stopping(self) -> bool:
        with self._cond:
            return self._stopping

    def is_gone(self) -> bool:
        """The port is closed or the simulator is stopping: nothing in flight gets an answer."""
        with self._cond:
            return self._gone_locked()

    # --- changes -----------------------------------------------------------------------------------------------

    def switch(self, entry: Scenario) -> Scenario:
        """Enter ``entry`` (after crediting the work done under the old one) and return the old one.

        A process that comes back after its port was closed is a new process, so that switch is a restart.
        """
        with self._cond:
            old = self._entry
            self._advance_locked(time.monotonic())
            self._enter_locked(entry, restart=entry.listening and not old.listening)
            self._cond.notify_all()
            return old

    def restart(self) -> None:
        """New start time, new ``_created`` values, every counter back to 0."""
        with self._cond:
            self._advance_locked(time.monotonic())
            self._restart_locked()
            self._cond.notify_all()

    def set_stopping(self, stopping: bool) -> None:
        """While stopping, queued and slow requests are let go without an answer."""
        with self._cond:
            self._stopping = stopping
            self._cond.notify_all()

    def record(self, method: str, path: str) -> None:
        with self._cond:
            self._requests.append(RecordedRequest(method=method, path=path, at=time.time()))

    def clear_requests(self) -> None:
        with self._cond:
            self._requests.clear()

    def count_http(self, handler: str, method: str, status: int) -> None:
        """Count one answer in http_requests_total, by handler, method and status class."""
        key = (handler, method, f"{status // 100}xx")
        with self._cond:
            count, created = self._http_counts.get(key, (0.0, time.time()))
            self._http_counts[key] = (count + 1.0, created)

    # --- waiting -----------------------------------------------------------------------------------------------

    def slow_wait(self, seconds: float) -> bool:
        """Hold a ``/metrics`` answer for ``seconds``; False if the server died or stopped meanwhile."""
        with self._cond:
            return not self._cond.wait_for(self._gone_locked, timeout=seconds)

    def complete(
        self, prompt_tokens: int, max_tokens: int, client_gone: Callable[[], bool], poll: float, engine: int = 0
    ) -> Outcome:
        """Wait for a slot on ``engine`` (vLLM's: 0) like vLLM's scheduler would, then serve the request at once.

        The request counts as waiting while it queues; ``engine.admits`` says when it gets a slot. Every
        ``poll`` seconds it looks whether the client hung up: then it leaves the queue, as vLLM aborts it.
        """
        with self._cond:
            enqueued = time.monotonic()
            self._real_waiting[engine] = self._real_waiting.get(engine, 0) + 1
            try:
                while True:
                    if self._gone_locked():
                        return Outcome.DROP
                    mode = self._entry.mode(engine)
                    if mode is EngineMode.SLEEPING:
                        return Outcome.SLEEPING
                    now = time.monotonic()
                    queued_for = now - max(enqueued, self._since)
                    if admits(mode, self.max_num_seqs, queued_for, self.busy_queue_seconds):
                        self._advance_locked(now)
                        self._engines[engine].serve(prompt_tokens, max_tokens)
                        return Outcome.SERVED
                    self._cond.wait(poll)
                    if client_gone():
                        return Outcome.GONE
            finally:
                self._real_waiting[engine] -= 1

    # --- the page ----------------------------------------------------------------------------------------------

    def families(self, model: str, legacy: bool, multiprocess: bool) -> list[Metric]:
        """Every family of the page, from one consistent snapshot taken now."""
        with self._cond:
            self._advance_locked(time.monotonic())
            return render(PageView(
                model=model,
                legacy=legacy,
                multiprocess=multiprocess or self._entry.multiprocess,
                start_time=self._start_time,
                engines=[self._engine_view_locked(index) for index in range(len(self._engines))],
                http_counts=self._http_counts,
            ))

    def locked(self, use: Callable[[Sequence[EngineCounters], Scenario, float], T]) -> T:
        """``use(engines, entry, start_time)`` under the lock, after crediting the work done until now."""
        with self._cond:
            self._advance_locked(time.monotonic())
            return use(self._engines, self._entry, self._start_time)

    def _engine_view_locked(self, index: int) -> EngineView:
        mode = self._entry.mode(index)
        running, waiting = background(mode, self.max_num_seqs)
        waiting += self._real_waiting.get(index, 0)
        return EngineView(self._engines[index], running, waiting, asleep=mode is EngineMode.SLEEPING,
                          deferred=waiting if mode in (EngineMode.DEFERRED, EngineMode.DEFERRED_HUNG) else 0)

    # --- mechanics (call with _cond held) ----------------------------------------------------------------------

    def _gone_locked(self) -> bool:
        return self._stopping or not self._entry.listening

    def _enter_locked(self, entry: Scenario, *, restart: bool) -> None:
        now = time.monotonic()
        self._entry = entry
        self._since = now
        while len(self._engines) < entry.min_engines:
            self._engines.append(self._new_engine())
        if entry.restarts or restart:
            self._restart_locked()
        self._settle_kv_locked(now)

    def _restart_locked(self) -> None:
        self._start_time = max(time.time(), self._start_time + 0.001)
        self._engines = [self._new_engine() for _ in self._engines]
        self._http_counts.clear()
        self._settle_kv_locked(time.monotonic())

    def _settle_kv_locked(self, now: float) -> None:
        kv = busy_kv(now - self._origin)
        for index, engine in enumerate(self._engines):
            engine.settle(self._entry.mode(index), kv)

    def _advance_locked(self, now: float) -> None:
        """Credit every engine with the work of the time since the last advance, under the entry in force."""
        dt = now - self._last_advance
        if dt <= 0:
            return
        self._last_advance = now
        kv = busy_kv(now - self._origin)
        for index, engine in enumerate(self._engines):
            mode = self._entry.mode(index)
            engine.advance(mode, dt, background(mode, self.max_num_seqs)[0], kv)
