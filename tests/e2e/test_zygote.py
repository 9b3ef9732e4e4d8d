"""The rig's warm zygote (tests/rig/zygote.py) stands in for the installed scripts in the fast suite: a run forked
from it must read exactly as the installed script's run (stdout, stderr, exit code), and whatever it cannot stand
in for goes to the installed script."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.rig.scripts import run_script
from tests.rig.zygote import Zygote
from vllm_simulator import Simulator


@pytest.fixture(scope="module")
def zygote():
    return Zygote()


#: What differs between any two runs: the handler's log stamp and pid, the state directory.
VARIES = re.compile(r"^\d{4}-\d\d-\d\dT[\d:]+[+-]\d{4} (\w+)\[\d+\]", re.M)


def _both(tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None):
    """The same run twice, each with a fresh state directory: forked, then the installed script."""
    seen = []
    for how in ("forked", "installed"):
        state = ["--state-dir", str(tmp_path / how)] if name == "check_vllm" else []
        r = run_script(name, *state, *args, env=env, installed=how == "installed")
        seen.append((r.code, *(VARIES.sub(r"STAMP \1[PID]", t.replace(str(tmp_path / how), "STATE"))
                               for t in (r.out, r.err))))
    return seen


@pytest.mark.parametrize(("name", "args"), [
    ("check_vllm", ("-u", "http://127.0.0.1:9")),                      # down: CRITICAL, 2
    ("check_vllm", ("-u", "ftp://x")),                                 # usage: UNKNOWN, 3
    ("check_vllm", ("--version",)),
    ("check_vllm", ("--probe", "liveness", "-u", "http://127.0.0.1:9", "--bogus")),  # a probe's own fault: 0
    ("check_vllm_restart", ("--state", "CRITICAL", "--state-type", "SOFT", "--url", "http://127.0.0.1:9", "--",
                            "false")),
    ("check_vllm_restart", ("--status", "--url", "ftp://x")),
])
def test_a_forked_run_reads_as_the_installed_scripts(tmp_path, name, args):
    forked, installed = _both(tmp_path, name, *args)
    assert forked == installed


def test_a_run_against_a_server_and_its_own_environment(tmp_path):
    """The environment is the run's own (an API key that cannot be sent is refused), and so is the server's
    answer read and the state saved."""
    bad = _both(tmp_path / "env", "check_vllm", "-u", "http://127.0.0.1:9",
                env={**os.environ, "VLLM_API_KEY": "two\nlines"})
    assert bad[0] == bad[1] and bad[0][0] == 3 and "cannot be sent" in bad[0][1], bad
    with Simulator(scenario="idle") as sim:
        forked, installed = _both(tmp_path / "sim", "check_vllm", "-u", sim.url, "--no-probe")
    assert forked == installed and forked[0] == 0 and forked[1].startswith("VLLM OK - idle:"), (forked, installed)


def test_past_its_timeout_a_forked_run_is_killed_as_subprocess_run_kills(zygote, tmp_path):
    # nothing listens on port 9 of this host, so the witness asks --pid-command, which takes 5 s to give up on
    # (-t 60 would answer then); the caller waits 1 s. The raise is the proof, no clock: a run that answered, however
    # late, returns its answer, and only a child the zygote killed at the caller's time-out raises
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run("check_vllm", ["-u", "http://127.0.0.1:9", "--pid-command", "sleep 30", "-t", "60",
                                  "--state-dir", str(tmp_path)], dict(os.environ), timeout=1)
    assert zygote.run("check_vllm", ["--version"], dict(os.environ), timeout=30)[0] == 3  # and it serves on


def test_what_changes_how_python_starts_is_left_to_the_installed_script(zygote):
    for changed in ({"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C"}, {"PYTHONPATH": "/nowhere"}):
        assert zygote.run("check_vllm", ["--version"], {**os.environ, **changed}, timeout=30) is None, changed
    assert zygote.run("no_such_script", [], dict(os.environ), timeout=30) is None


def test_a_busy_zygote_leaves_an_overlapping_run_to_the_installed_script(zygote):
    with zygote._lock:  # another thread's run in flight
        assert zygote.run("check_vllm", ["--version"], dict(os.environ), timeout=30) is None
