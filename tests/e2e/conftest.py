"""The installed check_vllm as a subprocess against the simulator (a real HTTP server on loopback)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.scripts import FAST, Result, script
from vllm_simulator import Simulator

CHECK = script("check_vllm")


@pytest.fixture
def run_check(tmp_path: Path):
    """Run the installed console script the way a scheduler does: argv, env, stdout, exit code."""
    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        full_env = {**os.environ, **(env or {})}
        argv = [CHECK, "--state-dir", str(tmp_path / "state"), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout)
        assert "Traceback" not in proc.stdout, proc.stdout
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator(scenario="idle").start()
    try:
        yield s
    finally:
        s.stop()



__all__ = ["FAST", "Result", "sys"]
