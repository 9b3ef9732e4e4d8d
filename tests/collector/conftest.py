"""Fixtures of the collector's fast tier: simulators on loopback, a clock the test owns, the plugin's own
protocol text. No Netdata runs here (the real agent is tests/netdata's, marked `netdata`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest

from vllm_simulator import Simulator


class Clock:
    """A wall clock and a monotonic clock that move only when the test says so."""

    def __init__(self, wall: float = 1_800_000_000.0, mono: float = 1000.0) -> None:
        self.w, self.m = wall, mono

    def wall(self) -> float:
        return self.w

    def mono(self) -> float:
        return self.m

    def advance(self, seconds: float) -> None:
        self.w += seconds
        self.m += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_sim() -> Iterator[Callable[..., Simulator]]:
    started: list[Simulator] = []

    def factory(**kwargs: object) -> Simulator:
        sim = Simulator(**kwargs).start()  # type: ignore[arg-type]
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


_MOVING = re.compile(r"^(SET (?:prompt|generation|steps|kv_cache)\S* = )\d+$", re.M)
_URL = re.compile(r"^CLABEL 'url' 'http://127\.0\.0\.1:\d+' 1$", re.M)


def masked(text: str) -> str:
    """Protocol text with what the simulator's real-time counters and free port make vary replaced by `#`."""
    return _URL.sub("CLABEL 'url' 'http://127.0.0.1:#' 1", _MOVING.sub(r"\g<1>#", text))
