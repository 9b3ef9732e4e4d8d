"""The fleet tier: from one host to many, with real software started here on 127.0.0.1.

    bash .ci/fleet-deps.sh && python -m pytest -m fleet tests/fleet tests/prometheus -q   (or: tox -e fleet)

HAProxy in front of two simulators (test_balancer.py), an Icinga 2 master and agent (test_icinga2_distributed.py),
a Netdata child streaming to a parent (test_netdata_streaming.py). Nothing skips: a component that cannot be
installed or started FAILS its tests with the reason and a log tail. Every process is torn down by its fixture.
"""

from __future__ import annotations

import time

TIMINGS: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_sep("-", "fleet tier timings")
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
