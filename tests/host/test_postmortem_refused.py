"""Where ptrace is refused, the bundle says why and how to allow it, and takes what the engine wrote itself
(issue 51), for real: a server process of another user (nobody) collected by root WITHOUT CAP_SYS_PTRACE (the
collection in a child run through `setpriv --bounding-set=-sys_ptrace`, as in a Kubernetes pod that drops ALL
capabilities): py-spy's and gdb's steps are refused and name the missing capability and `SYS_PTRACE`; and a
vLLM look-alike whose command line carries `--watchdog-config '{"dump_dir": ...}'`: its dump files are taken,
a link planted to /etc/shadow and another user's file are refused.

Root (setpriv, chown), py-spy and gdb (as tests/host/test_postmortem.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from check_vllm.postmortem import dumpers
from check_vllm.postmortem.collect import Result, collect
from check_vllm.postmortem.dumpers import Tools
from check_vllm.postmortem.refusal import MARK
from tests.rig.bundles import outcome, text

pytestmark = [
    pytest.mark.host,  # real processes of another user, a collection without a capability
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: setpriv to another uid and without CAP_SYS_PTRACE"),
]

NOBODY = 65534
AS_NOBODY = ("setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups")
EVIDENCE = {"verdict": "stuck"}
LOOPER = """
import sys, time
print("in", flush=True)
while True:
    time.sleep(0.05)
"""
#: The collection, in a child: root, without CAP_SYS_PTRACE in any set (a pod's `drop: ["ALL"]` for this one).
COLLECT = """
import json, sys
from pathlib import Path
from check_vllm.postmortem.collect import collect
r = collect(Path(sys.argv[1]), [int(p) for p in sys.argv[2:]], None, {"verdict": "stuck"})
print(json.dumps({"path": str(r.path), "steps": r.steps}))
"""
WITHOUT_PTRACE = ("setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace")
#: nobody's, with root kept as its saved uid (a set-id program's state): only root may attach to it.
SETID = f"""
import os
os.setgroups([])
os.setresgid({NOBODY}, {NOBODY}, {NOBODY})
os.setresuid({NOBODY}, {NOBODY}, 0)
""" + LOOPER


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen]]:
    procs: list[subprocess.Popen] = []

    def start(*argv: str, ready: bool = False) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE if ready else subprocess.DEVNULL)
        procs.append(proc)
        if ready:
            assert proc.stdout is not None and proc.stdout.readline() == b"in\n"
        return proc

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def tools() -> Tools:
    found = dumpers.find()
    assert found.py_spy and found.gdb, f"py-spy (pip) and gdb (apt) must be installed for this tier: {found}"
    return found


def without_ptrace(where: Path, *pids: int) -> Result:
    """collect() run by root without CAP_SYS_PTRACE, in a child."""
    tools()
    done = subprocess.run([*WITHOUT_PTRACE, sys.executable, "-c", COLLECT, str(where), *map(str, pids)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    result = Result(Path(said["path"]), 0.0, [tuple(s) for s in said["steps"]])
    print(json.dumps(result.steps, indent=1))
    return result


def dumped(result: Result, pid: int) -> str:
    """The outcome of the first dump of `pid` (py-spy's, or gdb's where its executable was not readable)."""
    return next(o for s, o in result.steps if s.split()[0] in ("py-spy", "gdb") and s.split()[1] == str(pid))


def granted(said: str) -> bool:
    return '["SYS_PTRACE"]' in said and "`--cap-add SYS_PTRACE`" in said and "`cap_add: [SYS_PTRACE]`" in said


def test_root_without_cap_sys_ptrace_is_refused_roots_server_and_says_why_once(tmp_path: Path, spawn):
    """A server of root's with all its capabilities (a host's unit, a container's default set), a handler whose
    bounding set lacks CAP_SYS_PTRACE (a systemd CapabilityBoundingSet=, a pod that drops ALL): the kernel
    (commoncap) refuses, and the bundle says so once, with the setting."""
    python = spawn(sys.executable, "-c", LOOPER, ready=True)
    native = spawn("sleep", "300")
    result = without_ptrace(tmp_path / "pm", python.pid, native.pid)
    for pid in (python.pid, native.pid):
        said = dumped(result, pid)
        assert said.startswith("failed") and f"; {MARK}: the process holds capabilities this one lacks, and no " \
            "CAP_SYS_PTRACE here; allow it with SYS_PTRACE added to the container" in said, said
        assert granted(said), said
    readme = text(result, "README.txt")
    assert readme.count("holds capabilities this one lacks") == 1, "each reason once"
    assert readme.count(f"; {MARK} (why: below)") == 2
    assert "state S" in text(result, f"proc-{python.pid}.txt"), "what /proc says is still taken"


def test_root_without_cap_sys_ptrace_and_another_users_process_names_the_missing_capability(tmp_path: Path, spawn):
    """A process of nobody's that keeps root as its saved uid (a set-id program): not one a dumper run as nobody
    may attach to, so root's dumper attaches, and without CAP_SYS_PTRACE it is refused: another user's."""
    setid = spawn(sys.executable, "-c", SETID, ready=True)
    said = dumped(without_ptrace(tmp_path / "pm", setid.pid), setid.pid)
    assert f"; {MARK}: another user's process (uid {NOBODY}) and no CAP_SYS_PTRACE here (root); " in said, said
    assert granted(said), said


def test_another_users_plain_process_is_dumped_as_its_user_without_the_capability(tmp_path: Path, spawn):
    """The control: nobody's own process needs no CAP_SYS_PTRACE where Yama allows (0 or none): the dumper runs
    as nobody. With Yama 1 or more, root's dumper is refused as above."""
    if (Path("/proc/sys/kernel/yama/ptrace_scope").exists()
            and Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip() != "0"):
        pytest.skip("Yama's ptrace_scope is above 0 here")
    native = spawn(*AS_NOBODY, "sleep", "300")
    said = dumped(without_ptrace(tmp_path / "pm", native.pid), native.pid)
    assert said.startswith("ok") and f"as uid {NOBODY}" in said and MARK not in said, said


def test_root_with_the_capability_is_not_refused(tmp_path: Path, spawn):
    """The control: a root server, the collection with CAP_SYS_PTRACE."""
    python = spawn(sys.executable, "-c", LOOPER, ready=True)
    result = collect(tmp_path / "pm", [python.pid], None, EVIDENCE, tools=tools())
    assert outcome(result, f"py-spy {python.pid}").startswith("ok"), result.steps
    assert MARK not in text(result, "README.txt")


def test_vllms_own_dumps_are_taken_and_a_planted_link_and_another_users_file_are_refused(tmp_path: Path, spawn):
    where = tmp_path / "vllm-dumps"
    where.mkdir()
    os.chown(where, NOBODY, NOBODY)
    config = json.dumps({"dump_dir": str(where), "timeout": 60})
    server = spawn(*AS_NOBODY, sys.executable, "-c", LOOPER, "serve", "--watchdog-config", config, ready=True)
    own = where / f"VLLM_STACK_DUMP_for_engine_0_{server.pid}.log"
    own.write_text("\n>>> Call stack dump #1 at Sun Dec  6 11:16:02 2026 due to feed timeout\n\n"
                   "Thread 0x00007f3c8e9fe740 (most recent call first):\n  File \"core.py\", line 1857 in "
                   "_process_engine_step\n\n" + "=" * 64 + "\n")
    os.chown(own, NOBODY, NOBODY)
    (where / "VLLM_STACK_DUMP_for_engine_1_1.log").symlink_to("/etc/shadow")
    theirs = where / "VLLM_STACK_DUMP_for_worker_0_2.log"
    theirs.write_text("another user's\n")
    os.chown(theirs, 1234, 1234)
    result = collect(tmp_path / "pm", [server.pid], None, EVIDENCE, tools=Tools())
    said = outcome(result, "engine dumps")
    assert said.startswith(f"ok: vLLM's watchdog dump_dir {where}: 1 taken; "), said
    assert "refused VLLM_STACK_DUMP_for_engine_1_1.log: a symlink, not followed" in said
    assert "refused VLLM_STACK_DUMP_for_worker_0_2.log: owned by uid 1234, not the server's user or root" in said
    assert "_process_engine_step" in text(result, own.name)
    assert result.path is not None and sorted(p.name for p in result.path.iterdir() if "STACK" in p.name) == [own.name]
    shadow = Path("/etc/shadow").read_text()
    assert not any(shadow and shadow in p.read_text(errors="replace") for p in result.path.iterdir())
    assert "vLLM's own all-thread stack dump" in text(result, "README.txt")
