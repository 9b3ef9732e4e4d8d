"""The installed console scripts, found once, and the one way a test reads a run of the check."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from check_vllm.contract.engines import ENGINES
from tests.rig.zygote import Zygote

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


#: The plugin API's state names, for the contract check below.
CODE_OF = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}


@functools.cache
def zygote() -> Zygote:
    """This test process's zygote (started on its first run)."""
    return Zygote()


def run_script(name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
               prefix: tuple[str, ...] = (), installed: bool = False) -> Result:
    """A console script's run as a scheduler runs it (argv, environment, stdout, exit code), forked from the warm
    zygote (tests/rig/zygote.py) unless `installed` asks for the script file itself (where how it starts is the
    subject), `prefix` runs it under another command (setpriv), or the zygote cannot stand in for it. No
    traceback ever reaches its output."""
    env = os.environ.copy() if env is None else env
    forked = None if installed or prefix else zygote().run(name, list(args), env, timeout)
    if forked is None:
        proc = subprocess.run([*prefix, script(name), *args], capture_output=True, text=True, timeout=timeout,
                              env=env)
        result = Result(proc.returncode, proc.stdout, proc.stderr)
    else:
        result = Result(forked.code, forked.out, forked.err)
    assert "Traceback" not in result.out + result.err, result.out + result.err
    return result


def run_check(state_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
              prefix: tuple[str, ...] = (), installed: bool = False) -> Result:
    """The check with its own state directory, run as run_script runs it."""
    return run_script("check_vllm", "--state-dir", str(state_dir), *args, env=env, timeout=timeout, prefix=prefix,
                      installed=installed)


def checked(r: Result) -> Result:
    """The plugin output contract, for a run against a real server: a status line whose state is the exit code
    (never UNKNOWN there), perfdata plain decimals or U."""
    assert any(r.out.startswith(f"{row.label} ") for row in ENGINES), (r.code, r.out, r.err)
    state = r.first.split(" - ", 1)[0].split(" ", 1)[1]
    assert CODE_OF.get(state) == r.code, f"exit {r.code} but status {state!r}: {r.out!r}"
    assert r.code in (0, 1, 2), (r.code, r.out, r.err)
    for value in r.perf.values():  # r.perf asserts every item's syntax
        assert value == "U" or "e" not in value.lower() and "nan" not in value and "inf" not in value, r.first
    return r


def real_runner(state_dir: Path) -> Callable[..., Result]:
    """`run(url, *args)`: the check against a real server, as a scheduler runs it, with its own state directory
    and no VLLM_API_KEY from the caller; every line printed (pytest shows it on failure), the contract checked."""

    def run(url: str, *args: str, timeout: float = 90) -> Result:
        r = run_check(state_dir, "-u", url, *args, timeout=timeout,
                      env={k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"})
        print(f"{time.strftime('%T')} exit {r.code}: {r.out.strip()}")
        return checked(r)

    return run
