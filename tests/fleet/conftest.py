"""The fleet tier: from one host to many, with real software started here on 127.0.0.1.

    bash .ci/fleet-deps.sh && python -m pytest -m "fleet or prometheus" tests/fleet tests/prometheus -q   (or: tox -e fleet)

HAProxy in front of two simulators (test_balancer.py), an Icinga 2 master and agent (test_icinga2_distributed.py),
a Netdata child streaming to a parent (test_netdata_streaming.py). Nothing skips: a component that cannot be
installed or started FAILS its tests with the reason and a log tail. Every process is torn down by its fixture.
"""

from __future__ import annotations

from tests.rig.timings import Timings

TIMINGS = Timings("fleet")
Timer = TIMINGS.timer


def pytest_terminal_summary(terminalreporter):
    TIMINGS.summary(terminalreporter)
