"""The in-process observer: a memory that never leaves its process, for the Netdata collector's jobs and the
HAProxy agent's backend (the check keeps its memory in a state file instead).

It dates every reading on the clocks the host dates a server process's start with (the wall clock and this
boot's boot-time clock, check_vllm.machine.clock): a loading server's age is then measured, so one that hangs
while it loads is down after --start-grace here as in the check, not "started 0.0 s ago" for ever. And it
sends the idle probe at most once per probe_every.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import httpx

from check_vllm.contract.defaults import Options, Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.machine import clock
from check_vllm.observe import Observation, observe
from check_vllm.server.fetch import Endpoint

#: The "boot" of test clocks (a wall and a monotonic function given by a test): always comparable.
IN_PROCESS = "in-process"


def given_clock(wall: Callable[[], float], mono: Callable[[], float]) -> Callable[[], Instant]:
    """Now on a test's own clocks: one process's memory, its readings always comparable with each other (never
    with a process's start, which the host dates on the boot-time clock)."""
    return lambda: Instant(wall(), mono(), IN_PROCESS)


class Observer:
    """One server's memory in this process, observed once per call."""

    def __init__(self, client: httpx.Client, endpoint: Endpoint, settings: Settings, options: Options,
                 probe_every: float, *, now: Callable[[], Instant] = clock.now,
                 mono: Callable[[], float] = time.monotonic,
                 fresh: Callable[[], tuple[Endpoint, str]] | None = None,
                 say: Callable[[str], None] = lambda _: None) -> None:
        """`fresh`: the connection now and what changed (check_vllm.cli.connection.Rotating), asked before each
        observation; a changed one gets a client of its own (a new CA is a new TLS context)."""
        self.client, self.endpoint, self.settings, self.options = client, endpoint, settings, options
        self.fresh, self.say = fresh, say
        self.probe_every, self.now, self.mono = probe_every, now, mono
        self.memory = Memory()
        self.last_probe: float | None = None
        self.probes = 0

    def may_probe(self) -> bool:
        """Asked by observe() only when the server is idle and a probe would prove it: at most once per probe_every."""
        if self.last_probe is not None and self.mono() - self.last_probe < self.probe_every:
            return False
        self.last_probe = self.mono()
        self.probes += 1
        return True

    def observe(self) -> Observation:
        """One observation (a GET /metrics; the probe only when idle and due); the memory carried on."""
        if self.fresh is not None:
            self._rotate(self.fresh)
        seen = observe(self.client, self.endpoint, self.memory, self.settings, self.options, now=self.now,
                       may_probe=self.may_probe)
        self.memory = seen.verdict.memory
        return seen


    def _rotate(self, fresh: Callable[[], tuple[Endpoint, str]]) -> None:
        endpoint, said = fresh()
        if said:
            self.say(said)
        if endpoint is not self.endpoint:
            old, self.client, self.endpoint = self.client, endpoint.client(), endpoint
            old.close()


def next_slot(now: float, every: float) -> float:
    """The next multiple of `every` on the monotonic clock after `now`: the cadence of an in-process observer
    (the collector's ticks, the agent's readings)."""
    return (math.floor(now / every) + 1) * every
