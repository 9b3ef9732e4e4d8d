"""The llama-server process's own state beside its counters: its identity and its sleep (b11434's server-queue.cpp).

``--sleep-idle-seconds N``: the task loop, finding no task for N seconds, unloads the model and sleeps; the next
request that needs the model (a completion, GET /slots: anything made with ``create_response()`` without bypass)
reloads it, which takes a moment, and the loop wakes. Every task but the metrics one resets the idle timer, and so
does every pass of the decode loop: a server with work never sleeps. /metrics, /props, /health and /v1/models
answer while it sleeps, from what was cached when it fell asleep, and wake nothing. The real loop looks at its
timer at least once a second, so it falls asleep up to a second late; the simulator sleeps on time.

The identity is ``Process-Start-Time-Unix``: ``ggml_time_us()`` when the server started, microseconds of
CLOCK_MONOTONIC despite its name; a restart (a new process start time) makes a new one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .llamacpp_engine import LlamacppOptions
from .scenarios import EngineMode

#: How often a waiting request looks whether its client left or the process died.
POLL_SECONDS = 0.05


class LlamacppServer:
    """One llama-server's identity and sleep state, behind its own lock (taken after the process lock, never before)."""

    def __init__(self, options: LlamacppOptions, lag: float = 0.0) -> None:
        self.options = options
        self._lag = lag  # how long after its process started it did (a router's children start one by one)
        self._cond = threading.Condition()
        self._start_time: float | None = None
        self._t_start_us = 0
        self._last_task = time.monotonic()
        self._asleep = False
        self._waking = False
        self._born: float | None = None  # a router's child loaded anew: it started then, not with the router

    def _renew_locked(self, start_time: float) -> None:
        """A new process: awake, its start instant and idle timer taken from its start (on the monotonic clock)."""
        if self._start_time == start_time:
            return
        self._start_time = start_time
        started = self._born if self._born is not None else \
            time.monotonic() - max(0.0, time.time() - start_time) + self._lag
        self._born = None
        self._t_start_us = max(int(started * 1e6), self._t_start_us + 1)
        self._last_task = started
        self._asleep = False
        self._waking = False
        self._cond.notify_all()

    def reborn(self) -> None:
        """A router loaded this child again: a new process from now on, whatever the router's start time."""
        with self._cond:
            self._start_time = None
            self._born = time.monotonic()
            self._cond.notify_all()

    def t_start_us(self, start_time: float) -> int:
        """The ``Process-Start-Time-Unix`` header of the process that started at ``start_time``."""
        with self._cond:
            self._renew_locked(start_time)
            return self._t_start_us

    def is_sleeping(self, start_time: float, mode: EngineMode, since: float) -> bool:
        """``queue_tasks.is_sleeping()`` now; ``since``: when the scenario in force began (its work ended then)."""
        with self._cond:
            self._renew_locked(start_time)
            return self._sleeping_locked(mode, since, time.monotonic())

    def _sleeping_locked(self, mode: EngineMode, since: float, now: float) -> bool:
        idle_seconds = self.options.sleep_idle_seconds
        if idle_seconds is None:
            return False
        if mode is not EngineMode.IDLE:  # work in the loop (or the loop stopped in it): the timer keeps resetting
            self._asleep = self._waking = False
            self._last_task = now
            return False
        if not self._asleep and now - max(self._last_task, since) >= idle_seconds:
            self._asleep = True
        return self._asleep

    def task(self, start_time: float) -> None:
        """A task other than the metrics one was posted (or ended): the idle timer starts again."""
        with self._cond:
            self._renew_locked(start_time)
            self._last_task = time.monotonic()

    def wake(self, start_time: float, mode: EngineMode, since: float, stop: Callable[[], bool]) -> bool:
        """``wait_until_no_sleep()``: ask the loop to wake and wait while it reloads the model.

        False if ``stop()`` says so first (the client left, the process died); the reload goes on without it.
        """
        with self._cond:
            self._renew_locked(start_time)
            if not self._sleeping_locked(mode, since, time.monotonic()):
                return True
            if not self._waking:
                self._waking = True
                timer = threading.Timer(self.options.reload_seconds, self._woke, args=(start_time,))
                timer.daemon = True
                timer.start()
            while self._asleep and self._start_time == start_time:
                if stop():
                    return False
                self._cond.wait(POLL_SECONDS)
            return True

    def _woke(self, start_time: float) -> None:
        """The model is loaded again: the loop leaves its sleep, its idle timer starting now."""
        with self._cond:
            if self._start_time == start_time and self._waking:
                self._asleep = self._waking = False
                self._last_task = time.monotonic()
                self._cond.notify_all()
