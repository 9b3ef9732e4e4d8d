"""Shared by the fleet tests: the INSTALLED check_vllm run as a scheduler runs it, and shipped files made local."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3


def script(name: str) -> str:
    """The console script next to this interpreter (the venv under test), else the one on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed next to {sys.executable} nor on PATH (pip install -e .)", pytrace=False)
    return found


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

    def __str__(self) -> str:
        return f"exit {self.code}: {self.first!r}" + (f" (stderr {self.err[-300:]!r})" if self.err.strip() else "")


def run_check(state_dir: Path, *args: str, timeout: float = 60) -> Result:
    argv = [script("check_vllm"), "--state-dir", str(state_dir), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return Result(proc.returncode, proc.stdout, proc.stderr)


def localise(text: str, replacements: dict[str, str]) -> str:
    """A shipped file with its example names swapped for the test's; each one must be there (or the file
    changed under the test, and the test must say so)."""
    for old, new in replacements.items():
        if old not in text:
            pytest.fail(f"the shipped file no longer contains {old!r}: update the fleet test", pytrace=False)
        text = text.replace(old, new)
    return text
