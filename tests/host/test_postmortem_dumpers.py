"""The dumpers a root post-mortem runs (issue 51), against real processes: gdb killed mid-attach on a process of
3000 threads leaves none of it stopped (PTRACE_ATTACH's SIGSTOPs, delivered once the kernel detaches the dead
tracer, stopped the whole process in most tries before the fix), one stopped before its dump is left stopped; a
dumper of another user's process runs as that user, as root again when that user may not run the tool or is
refused the attach; a py-spy another user owns, or in a directory others may write to, is never run by root.

Root (another user's process and files); py-spy from the test environment, gdb from Debian (.ci/run)."""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from check_vllm.postmortem import attach, dumpers, procs, stacks
from check_vllm.postmortem.collect import collect
from check_vllm.postmortem.dumpers import Tools
from tests.rig.bundles import outcome
from tests.rig.waiting import wait_for

pytestmark = [
    pytest.mark.host,  # real processes stopped and dumped: run alone, after the parallel suite
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's process, root's dumpers"),
]

NOBODY = 65534
EVIDENCE = {"verdict": "stuck"}
#: A Python process of many threads, each sleeping in a loop (gdb attaches them one by one: seconds for 3000).
THREADS = """
import signal, sys, threading, time
signal.signal(signal.SIGINT, lambda *_: open(sys.argv[2], "a").write("SIGINT\\n"))
threading.stack_size(64 * 1024)
def sleeper():
    while True:
        time.sleep(0.5)
for _ in range(int(sys.argv[1])):
    threading.Thread(target=sleeper, daemon=True).start()
print("in", flush=True)
while True:
    time.sleep(0.5)
"""
LOOPER = """
import ctypes, sys, time
if "--undumpable" in sys.argv:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not even its own user may attach
print("in", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen]]:
    started: list[subprocess.Popen] = []

    def start(*argv: str, user: int | None = None) -> subprocess.Popen:
        ids = {} if user is None else {"user": user, "group": user, "extra_groups": []}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd="/", **ids)  # type: ignore[call-overload]
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"in\n", argv
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def python_for(uid: int) -> str:
    """A Python interpreter `uid` may run (this one may be in root's home, as pyenv puts it)."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            if subprocess.run([python, "-c", ""], user=uid, group=uid, extra_groups=[], cwd="/").returncode == 0:
                return python
        except OSError:
            continue
    pytest.skip(f"no Python interpreter uid {uid} may run")


@functools.cache
def _reachable_py_spy(found: str) -> str:
    """The test environment's py-spy copied where another user may run it, root's alone to change: tox makes .tox
    0700 (.ci/run makes it 0755 first), and a dumper run as the server's user must be able to start."""
    where = tempfile.mkdtemp(prefix="check_vllm-tools-", dir="/tmp")
    atexit.register(shutil.rmtree, where, True)
    os.chmod(where, 0o755)
    copy = os.path.join(where, "py-spy")
    shutil.copy2(found, copy)
    os.chmod(copy, 0o755)
    return copy


def tools() -> Tools:
    found = dumpers.find()
    assert found.py_spy and found.gdb, f"py-spy (pip) and gdb (apt) must be installed for this tier: {found}"
    return dataclasses.replace(found, py_spy=_reachable_py_spy(found.py_spy))


def states(pid: int) -> list[str]:
    """Each thread's state letter, from /proc."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.append(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue
    return out


def proc_of(pid: int) -> procs.Proc:
    found = procs.proc(pid)
    assert found is not None, pid
    return found


def dump_of(pid: int, argv: tuple[str, ...]) -> stacks.Dump:
    return stacks.Dump(f"x {pid}", "x.txt", argv, 5.0, stacks.FIRST, pid=pid)


# --------------------------------------------------------------------------- no process left stopped

def test_gdb_killed_mid_attach_leaves_no_thread_of_a_3000_thread_process_stopped(tmp_path: Path, spawn):
    """gdb attaches thread by thread; killed meanwhile, the SIGSTOPs it queued and never took stop the whole
    process once the kernel detaches it (11 of 12 tries here before the fix). Each try must leave it running,
    and with no SIGINT (gdb sent on SIGTERM passes one on: 3 of 15 tries, a Python server's KeyboardInterrupt)."""
    interrupted = tmp_path / "sigint"
    proc = spawn(sys.executable, "-c", THREADS, "3000", str(interrupted))
    assert len(states(proc.pid)) > 3000
    target = proc_of(proc.pid)
    said = []
    for timeout in (0.25, 0.5, 0.75, 1.0):
        ran = attach.run(stacks.gdb(tools().gdb, target), timeout)
        said.append(ran.outcome)
        time.sleep(0.3)  # a SIGSTOP still pending would have stopped it by now
        stopped = [s for s in states(proc.pid) if s == "T"]
        assert not stopped, f"{len(stopped)} threads left stopped after: {ran.outcome}"
    print("\n".join(said))
    assert any(s.startswith("timed out after") for s in said), said
    assert not interrupted.exists(), said


def test_a_dumper_that_stopped_its_process_and_was_killed_has_it_resumed_and_says_so(tmp_path: Path, spawn):
    proc = spawn(sys.executable, "-c", LOOPER)
    stopper = tmp_path / "stopper"
    stopper.write_text(f"#!/bin/sh\nkill -STOP {proc.pid}\nexec sleep 1000\n")
    stopper.chmod(0o755)
    ran = attach.run(dump_of(proc.pid, (str(stopper),)), 1.0)
    assert ran.outcome.startswith("timed out after ") and ran.outcome.endswith(
        f"; process {proc.pid} resumed (SIGCONT): the killed dumper had left it stopped"), ran.outcome
    time.sleep(0.2)
    assert "T" not in states(proc.pid)


def test_a_process_stopped_before_its_dump_is_left_stopped(tmp_path: Path, spawn):
    """An operator's SIGSTOP, a frozen engine: the post-mortem records it as it was and changes nothing."""
    proc = spawn(sys.executable, "-c", LOOPER)
    os.kill(proc.pid, signal.SIGSTOP)
    wait_for(f"process {proc.pid} to stop", lambda: set(states(proc.pid)) == {"T"}, timeout=30, interval=0.01)
    ran = attach.run(dump_of(proc.pid, ("sleep", "1000")), 0.5)
    assert ran.outcome.startswith("timed out after ") and "SIGCONT" not in ran.outcome, ran.outcome
    time.sleep(0.2)
    assert set(states(proc.pid)) == {"T"}


# --------------------------------------------------------------------------- as the server's own user

def as_whom(uid: int) -> str:
    """What a dump of uid's process says of whom it ran as, by Yama's scope here."""
    return f" as uid {uid}" if not attach.ptrace_scope() else " as root; Yama's ptrace_scope"


def test_the_dumpers_of_another_users_process_run_as_that_user(tmp_path: Path, spawn):
    python = spawn(python_for(NOBODY), "-c", LOOPER, user=NOBODY)
    native = spawn("sh", "-c", "echo in; exec sleep 300", user=NOBODY)
    result = collect(tmp_path / "pm", [python.pid, native.pid], None, EVIDENCE, budget=30, tools=tools())
    print(result.steps)
    for step in (f"py-spy {python.pid}", f"py-spy --native {python.pid}", f"gdb {native.pid}"):
        said = outcome(result, step)
        assert said.startswith("ok in ") and as_whom(NOBODY) in said and "first run" not in said, said


def test_a_dumper_its_servers_user_cannot_start_is_run_again_as_root(tmp_path: Path, spawn):
    if attach.ptrace_scope():
        pytest.skip("Yama's ptrace_scope: dumpers run as root here")
    python = spawn(python_for(NOBODY), "-c", LOOPER, user=NOBODY)
    private = tmp_path / "root-only"  # a venv in /root: root's, 0700
    private.mkdir(mode=0o700)
    (private / "py-spy").symlink_to(str(tools().py_spy))
    ran = attach.run(stacks.py_spy(str(private / "py-spy"), proc_of(python.pid)), 10.0)
    assert ran.ok and ran.outcome.startswith("ok in ") and " as root; first run: could not start as uid " \
        f"{NOBODY}: Permission denied" in ran.outcome, ran.outcome


def test_a_dumper_refused_the_attach_as_the_servers_user_is_run_again_as_root(spawn):
    if attach.ptrace_scope():
        pytest.skip("Yama's ptrace_scope: dumpers run as root here")
    python = spawn(python_for(NOBODY), "-c", LOOPER, "--undumpable", user=NOBODY)
    ran = attach.run(stacks.py_spy(tools().py_spy, proc_of(python.pid)), 10.0)
    assert ran.ok and b"<module>" in ran.output, ran.outcome
    assert " as root; first run: failed (exit 1) in " in ran.outcome and f"as uid {NOBODY}: Permission Denied" \
        in ran.outcome, ran.outcome


def test_a_root_process_is_dumped_as_root_and_the_outcome_names_no_user(spawn):
    python = spawn(sys.executable, "-c", LOOPER)
    ran = attach.run(stacks.py_spy(tools().py_spy, proc_of(python.pid)), 10.0)
    assert ran.ok and " as " not in ran.outcome, ran.outcome


# --------------------------------------------------------------------------- root runs only root's files

def planted(where: Path, marker: Path, owner: int = 0, mode: int = 0o755) -> Path:
    """A `py-spy` that writes `marker` when run."""
    where.mkdir(exist_ok=True)
    path = where / "py-spy"
    path.write_text(f"#!/bin/sh\necho run > {marker}\n")
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def test_a_py_spy_another_user_owns_is_never_run_and_the_step_says_why(tmp_path: Path, spawn, monkeypatch):
    python = spawn(sys.executable, "-c", LOOPER)
    marker = tmp_path / "marker"
    theirs = planted(tmp_path / "bin", marker, owner=NOBODY)
    monkeypatch.setenv("PATH", f"{theirs.parent}:/usr/bin:/bin")
    found = dumpers.find()  # beside this interpreter: the test environment's own
    assert found.py_spy != str(theirs) and found.py_spy == os.path.join(os.path.dirname(sys.executable), "py-spy")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")  # and none there
    found = dumpers.find()
    why = f"{theirs} not run: {theirs} is owned by uid {NOBODY}, not root"
    assert found.py_spy is None and found.why_skipped("py-spy").startswith(why), found
    result = collect(tmp_path / "pm", [python.pid], None, EVIDENCE, budget=10)
    assert outcome(result, f"py-spy {python.pid}").startswith(why), result.steps
    assert not marker.exists(), "root ran another user's py-spy"


@pytest.mark.parametrize(("dir_mode", "file_mode", "why"), [
    (0o775, 0o755, "may be written by its group"),
    (0o777, 0o755, "may be written by others"),
    (0o755, 0o757, "may be written by others"),
    (0o1777, 0o755, ""),  # sticky: another user may not replace root's file
])
def test_a_root_handler_skips_a_tool_others_may_change(tmp_path: Path, monkeypatch, dir_mode, file_mode, why):
    tool = planted(tmp_path / "bin", tmp_path / "marker", mode=file_mode)
    tool.parent.chmod(dir_mode)
    monkeypatch.setenv("PATH", str(tool.parent))
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    found = dumpers.find()
    if why:
        assert found.py_spy is None and why in found.why_skipped("py-spy"), found
    else:
        assert found.py_spy == str(tool) and not found.skipped, found


def test_a_root_owned_link_to_another_users_file_is_skipped(tmp_path: Path, monkeypatch):
    theirs = planted(tmp_path / "theirs", tmp_path / "marker", owner=NOBODY)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "py-spy").symlink_to(theirs)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    found = dumpers.find()
    assert found.py_spy is None and f"{theirs} is owned by uid {NOBODY}" in found.why_skipped("py-spy"), found


def test_run_as_a_user_drops_roots_groups(tmp_path: Path):
    ran = dumpers.run(["id"], 5.0, (NOBODY, NOBODY))
    assert ran.ok and ran.outcome.endswith(f" as uid {NOBODY}"), ran.outcome
    assert f"uid={NOBODY}" in ran.output.decode() and "groups=65534" in ran.output.decode()
    assert "(root)" not in ran.output.decode()

