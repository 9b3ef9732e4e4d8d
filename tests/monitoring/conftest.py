"""The monitoring tier: real Icinga 2 and Nagios 4 run check_vllm and check_vllm_restart.

Run with:  python -m pytest tests/monitoring -m monitoring -p no:cacheprovider
(setup.cfg's addopts deselects it by default.) The handler's fast tests are tests/handler's, in the
default tier. Nothing here skips: see harness.py.
"""

from __future__ import annotations

import pytest

from tests.rig.timings import Timings

TIMINGS = Timings("monitoring")
Timer = TIMINGS.timer


def pytest_terminal_summary(terminalreporter):
    TIMINGS.summary(terminalreporter)


@pytest.fixture(scope="session")
def timer():
    return Timer
