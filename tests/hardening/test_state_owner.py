"""Whose the state directory is, end to end (issue 30, classes 3 and 6).

A run as root in the monitoring user's directory hands every file it makes to that user, who can then go on
reading and writing them; a directory another user could write to, or another user's, is refused (UNKNOWN
for the check, a refusal for the handler); files another user put in it are ignored.

A directory others may write to holds one private subdirectory per user (issue 36: a kubelet's emptyDir, a
Docker volume); a name in it someone else took first is refused.

The second user is nobody (65534), run through setpriv. It keeps CAP_DAC_READ_SEARCH only so that it can
start this checkout's Python (under /root, 0700): it may read and traverse anything, but every write, and
the lock's O_RDWR open, obeys the file's owner and mode as for any user.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.instants import Instant
from check_vllm.memory.files import write_json
from check_vllm.memory.marker import marker_json, marker_path
from check_vllm.memory.statefile import check_file
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


def private(state: Path, uid: int) -> Path:
    return state / f"uid-{uid}"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o2777, 0o770])
def test_a_shared_state_directory_holds_a_private_one_per_user(tmp_path, sim, mode):
    """A directory others may write to (a kubelet's emptyDir, a Docker volume of the image's 1777 directory,
    /tmp): each user keeps its files in its own 0700 subdirectory, and nothing else of the shared one is read."""
    state = tmp_path / "shared"
    state.mkdir()
    state.chmod(mode)
    first = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST)
    time.sleep(0.4)
    second = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST)
    assert (first.returncode, second.returncode) == (OK, OK), first.stdout + second.stdout
    assert ";" not in second.stdout.split(" | ")[0], second.stdout  # no note: the memory was kept
    mine = private(state, os.geteuid())
    assert os.listdir(state) == [mine.name]
    assert check_file(state, sim.url, proxy=False).path.parent == mine
    assert check_file(state, sim.url, proxy=False).load()[0].get("reading"), os.listdir(mine)
    st = os.lstat(mine)
    assert (st.st_uid, stat.S_IMODE(st.st_mode) & 0o777) == (os.geteuid(), 0o700)
    handler = restart(state, sim.url, tmp_path / "restarts.txt")
    assert "no restart" in handler.stdout and "refusing" not in handler.stdout, handler.stdout
    status = run(HANDLER, "--status", "--url", sim.url, "--state-dir", str(state))
    assert "refusing" not in status.stdout and status.returncode != UNKNOWN, status.stdout
    assert os.listdir(state) == [mine.name], "the handler keeps its files in the same private directory"


@as_root
def test_a_kubelet_emptydir_with_fsgroup_serves_the_pods_user(base, sim):
    """What the kubelet makes (pkg/volume/emptydir: 0777; fsGroup: chown root:GID, setgid): the probes of
    runAsUser 1000 keep their memory in it; a second user beside it keeps its own, and neither reads the other's."""
    state = base / "empty-dir"
    state.mkdir()
    os.chown(state, 0, USER)
    state.chmod(0o2777)
    for _ in range(2):
        as_user = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
        time.sleep(0.4)
    assert as_user.returncode == OK and ";" not in as_user.stdout.split(" | ")[0], as_user.stdout
    as_root_ = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST)
    assert as_root_.returncode == OK and ";" not in as_root_.stdout.split(" | ")[0], as_root_.stdout
    assert sorted(os.listdir(state)) == sorted([f"uid-{USER}", "uid-0"])
    assert len(os.listdir(private(state, USER))) == len(os.listdir(private(state, 0))) >= 2  # state + lock each
    st = os.lstat(private(state, USER))
    assert (st.st_uid, stat.S_IMODE(st.st_mode) & 0o777) == (USER, 0o700)


@as_root
@pytest.mark.parametrize("planted", ["directory", "symlink"])
def test_a_private_directory_someone_else_made_first_is_refused(base, sim, planted):
    shared = base / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = base / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NEIGHBOUR, NEIGHBOUR)
    name = private(shared, USER)
    if planted == "directory":
        name.mkdir(mode=0o700)
        os.chown(name, NEIGHBOUR, NEIGHBOUR)
    else:
        name.symlink_to(theirs)
        os.lchown(name, NEIGHBOUR, NEIGHBOUR)
    check = run(CHECK, "--url", sim.url, "--state-dir", str(shared), *FAST, prefix=AS_USER)
    assert check.returncode == UNKNOWN, check.stdout
    said = f"VLLM UNKNOWN - refusing the state directory {name}: "
    said += f"it belongs to uid {NEIGHBOUR}, who made it before" if planted == "directory" else "it is a symlink"
    assert check.stdout.startswith(said), check.stdout
    handler = restart(shared, sim.url, base / "restarts.txt", prefix=AS_USER)
    assert handler.returncode == 1 and "no restart: refusing the state directory" in handler.stdout, handler.stdout
    assert os.listdir(theirs) == [], "nothing is written through the plant"


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


@as_root
def test_a_probe_in_a_refused_state_directory_reads_the_server_alone_and_says_so(base, sim):
    """Issue 36: a probe's own fault never spends the startup budget on a server it reads serving; nothing
    in the refused directory is read or written, and every line says the memory is not kept."""
    state = base / "theirs"
    state.mkdir(mode=0o755)
    os.chown(state, NEIGHBOUR, NEIGHBOUR)
    lines = {}
    for kind in ("startup", "readiness", "liveness"):
        done = run(CHECK, "--probe", kind, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
        lines[kind] = (done.returncode, done.stdout.strip())
    for kind, (code, line) in lines.items():
        assert code == 0, lines
        assert line.startswith(f"{kind} pass in spite of: UNKNOWN refusing the state directory {state}: "), lines
        assert "busy: 2 running" in line, lines  # the server was read this run
    assert os.listdir(state) == []
    check = run(CHECK, "--url", sim.url, "--state-dir", str(state), *FAST, prefix=AS_USER)
    assert check.returncode == UNKNOWN and "refusing the state directory" in check.stdout, check.stdout
