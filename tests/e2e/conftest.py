"""The installed check_vllm as a subprocess against the simulator (a real HTTP server on loopback)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.scripts import FAST, Result
from tests.rig.scripts import run_check as rig_run
from vllm_simulator import Simulator


@pytest.fixture
def run_check(tmp_path: Path):
    """Run the installed console script the way a scheduler does: argv, env, stdout, exit code."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        return rig_run(tmp_path / "state", *args, env={**os.environ, **(env or {})}, timeout=timeout)

    return run


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator(scenario="idle").start()
    try:
        yield s
    finally:
        s.stop()



__all__ = ["FAST", "Result", "sys"]
