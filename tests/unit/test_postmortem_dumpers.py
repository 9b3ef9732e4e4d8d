"""As whom a post-mortem's dumper runs and when its process is resumed (issue 51), /proc and the dumpers faked:
the server's own uid where Yama lets that user attach, root where it does not or where that user is refused,
SIGCONT only after a killed or failed run of a process that was running before it. The real processes and
dumpers are in tests/host/test_postmortem_dumpers.py."""

from __future__ import annotations

import os
import signal

import pytest

from check_vllm.postmortem import attach, dumpers, stacks
from check_vllm.postmortem.dumpers import Ran, Tools
from check_vllm.postmortem.procs import Proc

PY = Proc(100, 1, "python3", "S", 1.0, ("python3",), "/usr/bin/python3.11")
NATIVE = Proc(200, 1, "llama-server", "S", 1.0, ("llama-server",), "/opt/llama-server")
ALL = Tools("/bin/py-spy", "/usr/bin/gdb", "/usr/bin/nvidia-smi")


def status(uid: int, gid: int | None = None) -> str:
    g = uid if gid is None else gid
    return f"Name:\tx\nState:\tS (sleeping)\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{g}\t{g}\t{g}\t{g}\n"


@pytest.fixture
def proc_files(monkeypatch) -> dict[str, str]:
    """/proc as attach reads it, and a root handler."""
    files = {"/proc/100/status": status(1000), "/proc/100/stat": "100 (python3) S 1 100", attach.YAMA: "0\n"}
    monkeypatch.setattr(attach, "read", lambda path, cap=0: files.get(path, ""))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return files


@pytest.fixture
def runs(monkeypatch) -> list[tuple[tuple[int, int] | None, bool]]:
    """The dumper's runs, (as whom, polite), and its process's resumptions, ("resume", pid, why)."""
    calls: list = []

    def resume(pid: int, why: str) -> str:
        calls.append(("resume", pid, why))
        return f"resumed {why}"
    monkeypatch.setattr(attach, "resume", resume)
    return calls


def fake(monkeypatch, calls: list, *said: Ran) -> None:
    results = list(said)

    def run(argv: list[str], timeout: float, user: tuple[int, int] | None = None, polite: bool = True) -> Ran:
        calls.append((user, polite))
        return results.pop(0)
    monkeypatch.setattr(dumpers, "run", run)


def test_every_attaching_dump_knows_its_process_and_gdb_is_killed_without_sigterm():
    plan = {d.step: d for d in stacks.plan([PY, NATIVE], ALL)}
    assert plan["py-spy 100 (python3)"].pid == 100 and plan["py-spy --native 100 (python3)"].pid == 100
    gdb = plan["gdb 200 (llama-server)"]
    assert gdb.pid == 200 and not gdb.polite, "on SIGTERM gdb passes a SIGINT on to the process it attached"
    assert plan["nvidia-smi -q"].pid is None and plan["nvidia-smi -q"].polite


def test_a_tool_skipped_as_unsafe_says_why_in_place_of_how_to_install_it():
    why = "/tmp/x/py-spy not run: /tmp/x/py-spy is owned by uid 65534, not root (...)"
    plan = {d.step: d for d in stacks.plan([PY, NATIVE], Tools(None, "/usr/bin/gdb", None, (("py-spy", why),)))}
    assert plan["py-spy 100 (python3)"].argv is None and plan["py-spy 100 (python3)"].why_not == why
    assert plan["nvidia-smi -q"].why_not == "no nvidia-smi on this host"


@pytest.mark.parametrize(("uid", "gid", "scope", "whom", "note"), [
    (1000, 1000, "0\n", (1000, 1000), ""),
    (1000, 1001, "", (1000, 1001), ""),  # no Yama: its own user may attach
    (1000, 1000, "1\n", attach.ROOT, "Yama's ptrace_scope 1: only root may attach to uid 1000's process"),
    (1000, 1000, "2\n", attach.ROOT, "Yama's ptrace_scope 2: only root may attach to uid 1000's process"),
    (0, 0, "0\n", None, ""),  # root's own
])
def test_a_root_handler_dumps_as_the_processs_user_where_yama_lets_that_user_attach(
        proc_files, uid, gid, scope, whom, note):
    proc_files["/proc/100/status"], proc_files[attach.YAMA] = status(uid, gid), scope
    assert attach.user_of(100) == (whom, note)


def test_a_set_id_process_or_a_gone_one_or_a_non_root_handler_runs_as_itself(proc_files, monkeypatch):
    proc_files["/proc/100/status"] = "Uid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n"
    assert attach.user_of(100) == (None, "")
    assert attach.user_of(999) == (None, "")
    proc_files["/proc/100/status"] = status(1000)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert attach.user_of(100) == (None, "")


def test_a_run_its_user_cannot_start_is_run_again_as_root_and_the_outcome_says_both(proc_files, runs, monkeypatch):
    fake(monkeypatch, runs, Ran(b"", "could not start as uid 1000: Permission denied", False, denied=True),
         Ran(b"stacks", "ok in 0.4 s as root", True))
    ran = attach.run(stacks.py_spy("/root/venv/bin/py-spy", PY), 5.0)
    assert ran.ok and ran.output == b"stacks"
    assert ran.outcome == "ok in 0.4 s as root; first run: could not start as uid 1000: Permission denied"
    assert runs == [((1000, 1000), True), (attach.ROOT, True)], "nothing to resume after a run that never started"


def test_gdb_refused_the_attach_as_its_user_though_it_exits_0_is_run_again_as_root(proc_files, runs, monkeypatch):
    fake(monkeypatch, runs, Ran(b"ptrace: Operation not permitted.\nNo threads.\n", "ok in 0.1 s as uid 1000", True),
         Ran(b"#0 poll", "ok in 0.9 s as root", True))
    ran = attach.run(stacks.gdb("/usr/bin/gdb", PY), 5.0)
    assert ran.outcome == "ok in 0.9 s as root; first run: refused as uid 1000: ptrace: Operation not permitted."
    assert [r[0] for r in runs if r[0] != "resume"] == [(1000, 1000), attach.ROOT] and runs[0][1] is False


def test_another_failure_as_its_user_is_not_run_again(proc_files, runs, monkeypatch):
    fake(monkeypatch, runs, Ran(b"Error: no python", "failed (exit 1) in 0.1 s as uid 1000: Error: no python", False))
    ran = attach.run(stacks.py_spy("/bin/py-spy", PY), 5.0)
    assert ran.outcome.startswith("failed (exit 1) in 0.1 s as uid 1000: ") and len(runs) == 2


def test_a_killed_run_resumes_a_process_that_was_running_and_a_stopped_one_is_left_alone(
        proc_files, runs, monkeypatch):
    killed = Ran(b"", "timed out after 1.0 s as uid 1000 (its process group killed)", False, killed=True)
    fake(monkeypatch, runs, killed)
    ran = attach.run(stacks.gdb("/usr/bin/gdb", PY), 1.0)
    assert ran.outcome == f"{killed.outcome}; resumed killed" and runs[1] == ("resume", 100, "killed")
    for state in ("T", "t"):  # an operator's SIGSTOP, a debugger's stop
        runs.clear()
        proc_files["/proc/100/stat"] = f"100 (python3) {state} 1 100"
        fake(monkeypatch, runs, killed)
        assert attach.run(stacks.gdb("/usr/bin/gdb", PY), 1.0).outcome == killed.outcome
        assert runs == [((1000, 1000), False)]


def test_an_ok_run_resumes_nothing(proc_files, runs, monkeypatch):
    fake(monkeypatch, runs, Ran(b"#0 poll", "ok in 0.2 s as uid 1000", True))
    assert attach.run(stacks.gdb("/usr/bin/gdb", PY), 1.0).outcome == "ok in 0.2 s as uid 1000"
    assert runs == [((1000, 1000), False)]


def test_resume_says_so_only_when_the_process_was_stopped(monkeypatch):
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    seen = iter([True, False])
    monkeypatch.setattr(attach, "stopped", lambda pid, pending=False: next(seen))
    monkeypatch.setattr(attach, "RESUME_EVERY", 0.0)
    assert attach.resume(7, "killed") == "process 7 resumed (SIGCONT): the killed dumper had left it stopped"
    assert sent == [(7, signal.SIGCONT)]
    monkeypatch.setattr(attach, "stopped", lambda pid, pending=False: False)
    assert attach.resume(7, "failed") == "" and len(sent) == 2, "sent all the same: a stop may be on its way"


def test_the_chain_of_a_tool_is_it_and_every_directory_up_to_the_root():
    assert dumpers._chain("/usr/local/bin/gdb") == ["/usr/local/bin/gdb", "/usr/local/bin", "/usr/local", "/usr", "/"]
