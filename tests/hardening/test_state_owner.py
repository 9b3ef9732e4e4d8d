"""Whose the state directory is, end to end (issue 30, classes 3 and 6).

A run as root in the monitoring user's directory hands every file it makes to that user, who can then go on
reading and writing them; a directory another user could write to, or another user's, is refused (UNKNOWN
for the check, a refusal for the handler); files another user put in it are ignored.

The second user is nobody (65534), run through setpriv. It keeps CAP_DAC_READ_SEARCH only so that it can
start this checkout's Python (under /root, 0700): it may read and traverse anything, but every write, and
the lock's O_RDWR open, obeys the file's owner and mode as for any user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.values import Instant
from check_vllm.memory.marker import marker_json, marker_path
from check_vllm.memory.statefile import check_file, write_json
from check_vllm.restart.history import history_file
from tests.rig.ports import free_port
from tests.rig.scripts import script
from vllm_simulator import Simulator

from .conftest import CRITICAL, FAST, OK, UNKNOWN

USER, NEIGHBOUR = 65534, 65533
CHECK, HANDLER = script("check_vllm"), script("check_vllm_restart")
AS_USER = ("setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--inh-caps=+dac_read_search",
           "--ambient-caps=+dac_read_search")

as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                             reason="needs root and setpriv: a second user is made with setuid")


def run(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    out = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    return out


def restart(state: Path, url: str, counter: Path, *extra: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return run(HANDLER, "--state", "CRITICAL", "--state-type", "HARD", "--url", url, "--state-dir", str(state),
               *extra, "--", sys.executable, "-c", f"open({str(counter)!r}, 'a').write('restart\\n')", prefix=prefix)


def plant_verdict(state: Path, url: str, word: str = "stuck", age: float = 1.0) -> None:
    check_file(state, url, proxy=False).save(
        {"verdict": {"word": word, "state": 2, "text": "planted", "at": time.time() - age, "engines": {}}})


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every user may traverse (pytest's tmp_path is under root's 0700 one)."""
    made = Path(tempfile.mkdtemp(prefix="check_vllm-owner-"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(scenario="busy") as s:
        yield s


@as_root
def test_a_run_as_root_in_the_monitoring_users_directory_leaves_only_that_users_files(base, sim):
    tmp_path = base
    state = base / "state"
    state.mkdir(mode=0o750)
    os.chown(state, USER, USER)
    first = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST)  # the operator's try, as root
    assert first.returncode == OK and "state not saved" not in first.stdout, first.stdout
    url = f"http://127.0.0.1:{free_port()}"
    plant_verdict(state, url)  # a stuck verdict the handler acts on: history, marker and output made as root
    logs = base / "log"
    logs.mkdir(mode=0o750)
    os.chown(logs, USER, USER)
    done = restart(state, url, tmp_path / "restarts.txt", "--log", str(logs / "restart.log"))
    assert ": restarted: verdict 'stuck'" in done.stdout, done.stdout
    assert (logs / "restart.log").stat().st_uid == USER, "the --log made by root stays the user's"
    made = sorted(os.scandir(state), key=lambda e: e.name)
    assert len(made) >= 6, [e.name for e in made]  # state + lock of each target, history + lock, marker, output
    assert [(e.name, e.stat().st_uid, e.stat().st_gid) for e in made if e.stat().st_uid != USER
            or e.stat().st_gid != USER] == [], "root left files the monitoring user does not own"
    again = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
    assert again.returncode == OK and "state not saved" not in again.stdout, again.stdout
    time.sleep(1.1)
    plant_verdict(state, url, age=0)  # a verdict after the restart: only the cooldown holds the next one back
    status = run(HANDLER, "--status", "--url", url, "--state-dir", str(state), prefix=AS_USER)
    assert status.stdout.startswith("VLLM_RESTART WARNING - held back: ") and "cooldown" in status.stdout, status.stdout
    second = restart(state, url, tmp_path / "restarts.txt", prefix=AS_USER)
    assert "restart refused" in second.stdout and "cooldown" in second.stdout, second.stdout


@as_root
def test_files_root_left_before_the_hand_over_do_not_lock_the_monitoring_user_out(base, sim):
    """Root-owned 0600 files of an earlier version's root run: the lock is replaced, the state file read as
    unreadable once and then replaced by the save; the run after is clean."""
    state = base / "state"
    state.mkdir(mode=0o750)
    os.chown(state, USER, USER)
    store = check_file(state, sim.url, proxy=False)
    for leftover in (store.path.with_suffix(".lock"), store.path):
        leftover.write_text("{}")
        leftover.chmod(0o600)  # root's, as f2970e2 left them
    first = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
    assert "state not saved" not in first.stdout and "Traceback" not in first.stderr, first.stdout
    time.sleep(0.4)
    second = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
    assert second.returncode == OK and ";" not in second.stdout.split(" | ")[0], second.stdout
    assert {p.stat().st_uid for p in state.iterdir()} == {USER}


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770])
def test_a_state_directory_others_may_write_is_refused(tmp_path, sim, mode):
    state = tmp_path / "shared"
    state.mkdir()
    state.chmod(mode)
    check = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST)
    assert check.returncode == UNKNOWN, check.stdout
    assert check.stdout.startswith(f"VLLM UNKNOWN - refusing the state directory {state}: writable by "), check.stdout
    assert "chmod go-w" in check.stdout
    handler = restart(state, sim.url, tmp_path / "restarts.txt")
    assert handler.returncode == 1 and "no restart: refusing the state directory" in handler.stdout, handler.stdout
    status = run(HANDLER, "--status", "--url", sim.url, "--state-dir", str(state))
    assert status.returncode == UNKNOWN and "refusing the state directory" in status.stdout, status.stdout
    assert sorted(os.listdir(state)) == [], "a refused directory is left as it was"


@as_root
def test_another_users_state_directory_is_refused(base, sim):
    state = base / "theirs"
    state.mkdir(mode=0o755)
    os.chown(state, NEIGHBOUR, NEIGHBOUR)
    check = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
    assert check.returncode == UNKNOWN, check.stdout
    assert f"refusing the state directory {state}: it belongs to " in check.stdout, check.stdout
    assert f"uid {NEIGHBOUR}" in check.stdout and "--state-dir" in check.stdout
    status = run(HANDLER, "--status", "--url", sim.url, "--state-dir", str(state), prefix=AS_USER)
    assert status.returncode == UNKNOWN and "it belongs to" in status.stdout, status.stdout


@as_root
def test_root_refuses_another_users_directory_in_a_directory_anyone_may_write(base, sim):
    """Root may use the monitoring user's directory, but not one a neighbour made first in /tmp."""
    shared = base / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    state = shared / "check_vllm"
    state.mkdir(mode=0o700)
    os.chown(state, NEIGHBOUR, NEIGHBOUR)
    check = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST)
    assert check.returncode == UNKNOWN and "where anyone could have made it first" in check.stdout, check.stdout
    assert os.listdir(state) == []


@as_root
def test_a_marker_and_a_history_another_user_planted_are_ignored(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    url = f"http://127.0.0.1:{free_port()}"
    now = time.time()
    history = history_file(state, url, 5)
    history.save({"restarts": [{"at": now - 60 * i, "verdict": "down", "command": "x", "rc": 0} for i in (1, 2, 3)]})
    marker = marker_path(state, url)
    write_json(marker, marker_json(Instant(now, None, None), by="neighbour", in_progress=True))
    for planted in (history.path, marker):
        os.chown(planted, NEIGHBOUR, NEIGHBOUR)
    check = run(CHECK, "--url", url, "--state-dir", str(state), *FAST)
    assert check.returncode == CRITICAL and check.stdout.startswith("VLLM CRITICAL - down: "), check.stdout
    assert f"; restart marker belongs to uid {NEIGHBOUR}; ignored" in check.stdout, check.stdout
    plant_verdict(state, url, "down")
    done = restart(state, url, tmp_path / "restarts.txt")
    assert ": restarted: verdict 'down'" in done.stdout, done.stdout  # no breaker, no cooldown from the plant
    assert f"restart history belongs to uid {NEIGHBOUR}; ignored" in done.stdout, done.stdout
