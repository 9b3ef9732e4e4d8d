"""The installed check_vllm as a subprocess against the simulator (a real HTTP server on loopback)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vllm_simulator import Simulator

CHECK = shutil.which("check_vllm") or ""
PERF = re.compile(r"^[a-z_]+=(U|-?[0-9]+(\.[0-9]+)?(%|s)?)(;[^;\s]*){0,4}$")


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def first(self) -> str:
        return self.out.splitlines()[0] if self.out else ""

    @property
    def status(self) -> str:
        """The words after 'VLLM STATE - ' and before the perfdata."""
        return self.first.split(" | ")[0].split(" - ", 1)[-1]

    @property
    def word(self) -> str:
        return self.status.split(":", 1)[0]

    @property
    def perf(self) -> dict[str, str]:
        if " | " not in self.first:
            return {}
        items = self.first.split(" | ", 1)[1].split()
        for item in items:
            assert PERF.match(item), f"bad perfdata {item!r} in {self.first!r}"
        return {i.split("=")[0]: i.split("=")[1].split(";")[0].rstrip("%s") for i in items}


@pytest.fixture
def run_check(tmp_path: Path):
    """Run the installed console script the way a scheduler does: argv, env, stdout, exit code."""
    assert CHECK, "check_vllm is not installed (pip install -e .)"

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


#: Fast settings for tests: the gap and re-read delay are seconds in production.
FAST = ("--min-gap", "0.3", "--reread-delay", "0.4")

__all__ = ["FAST", "Result", "sys"]
