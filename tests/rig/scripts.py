"""The installed console scripts, found once, and the one way a test reads a run of the check."""

from __future__ import annotations

import re
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Fast settings for the check end to end: the gap and re-read delay are seconds in production.
FAST = ("--min-gap", "0.3", "--reread-delay", "0.4")
PERF = re.compile(r"^[a-z_]+=(U|-?[0-9]+(\.[0-9]+)?(%|s)?)(;[^;\s]*){0,4}$")


def script(name: str) -> str:
    """The console script of this interpreter's environment (the venv under test; PATH need not include it, and
    a version manager's shim on PATH is not it), else PATH's; a clear failure when neither has it."""
    beside = Path(sysconfig.get_path("scripts")) / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed in {beside.parent} nor on PATH (pip install -e .)", pytrace=False)
    return found


@dataclass
class Result:
    """A run of the check: exit code, stdout, stderr, and the status line read as the contract writes it."""

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
        """Perfdata label -> value without its unit; every item must be well formed."""
        if " | " not in self.first:
            return {}
        items = self.first.split(" | ", 1)[1].split()
        for item in items:
            assert PERF.match(item), f"bad perfdata {item!r} in {self.first!r}"
        return {i.split("=")[0]: i.split("=")[1].split(";")[0].rstrip("%s") for i in items}

    def __str__(self) -> str:
        return f"exit {self.code}: {self.first!r}" + (f" (stderr {self.err[-300:]!r})" if self.err.strip() else "")
