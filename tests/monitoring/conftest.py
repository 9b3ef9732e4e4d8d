"""The monitoring tier: real Icinga 2 and Nagios 4 run check_vllm and check_vllm_restart.

Run with:  python -m pytest tests/monitoring -m monitoring -p no:cacheprovider
(setup.cfg's addopts deselects it by default.) The handler's fast tests are tests/handler's, in the
default tier. Nothing here skips: see harness.py.
"""

from __future__ import annotations

import time

import pytest

TIMINGS: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_sep("-", "monitoring tier timings")
        for k, v in TIMINGS.items():
            terminalreporter.write_line(f"{k}: {v:.1f}s")


class Timer:
    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self):
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        TIMINGS[self.name] = time.monotonic() - self.t0


@pytest.fixture(scope="session")
def timer():
    return Timer
