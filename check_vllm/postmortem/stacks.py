"""Which stack dumps a post-mortem takes of which process, in what order: py-spy for Python processes (vLLM's
API server, EngineCore and workers, SGLang's schedulers), gdb for native ones (llama-server), then what is
worth it only while time is left. py-spy's --nonblocking reads a process without stopping it, and reads one
already stopped (SIGSTOP, ptrace), so it goes first; --native needs the process to stop for it, so it comes
after, only for processes still running; gdb stops what it attaches to, so it comes after the /metrics read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from check_vllm.postmortem.dumpers import INSTALL, Tools
from check_vllm.postmortem.procs import Proc

#: Each dumper's own time-out (the budget's share may be less): a healthy dump of a big process takes a
#: fraction of it.
PY_SPY_CAP = 10.0
GDB_CAP = 15.0
NVIDIA_CAP = 8.0

#: gdb's words for an attach that did not happen (another tracer holds a thread: a debugger, strace; no
#: CAP_SYS_PTRACE): it still exits 0.
GDB_FAILED = ("ptrace: Operation not permitted", "No threads.", "already traced by")
#: py-spy's --nonblocking reads a running process's memory while it changes: a frame freed under the read
#: fails the whole dump ("Failed to get stack traces ... Bad address"), and the next read usually succeeds.
PY_SPY_RACE = ("Failed to get stack traces",)
PY_SPY_TRIES = 3

#: Phases: before the /metrics page is waited for (nothing stopped), after it, and only with time to spare.
FIRST, AFTER_METRICS, SPARE = 0, 1, 2


@dataclass(frozen=True)
class Dump:
    """One dumper's run: its step's name, the bundle file it fills, its command (None: the tool is missing or was
    not taken, `why_not` says why and how to get it), its own time-out and phase."""
    step: str
    file: str
    argv: tuple[str, ...] | None
    cap: float
    phase: int
    why_not: str = ""
    #: What in its output means it failed although it exited 0 (gdb -batch does when it cannot attach).
    fails_on: tuple[str, ...] = ()
    #: What in a failed run's output means a racy read worth another try, and how many runs in all it gets
    #: (each within the step's own time).
    retry_on: tuple[str, ...] = ()
    tries: int = 1
    #: The process it attaches to (None: none, nvidia-smi): run as its user where it can, and never left stopped.
    pid: int | None = None
    #: SIGTERM before SIGKILL at its time-out. Not gdb: on SIGTERM it passes a Ctrl-C on, a SIGINT to the process
    #: it attached (3 of 15 tries mid-attach on 3000 threads), which ends a Python server (KeyboardInterrupt).
    polite: bool = True


def _named(p: Proc) -> str:
    return f"{p.pid} ({p.comm})"


def py_spy(tool: str | None, p: Proc, native: bool = False, skipped: str = "") -> Dump:
    """`skipped`: why the py-spy found was not taken, said in place of how to install it."""
    flag = "--native" if native else "--nonblocking"
    step = f"py-spy{' --native' if native else ''} {_named(p)}"
    file = f"py-spy{'-native' if native else ''}-{p.pid}.txt"
    if tool is None:
        return Dump(step, file, None, PY_SPY_CAP, FIRST, skipped or f"py-spy not installed: {INSTALL['py-spy']}")
    argv = (tool, "dump", "--pid", str(p.pid), flag)
    if native:
        return Dump(step, file, argv, PY_SPY_CAP, SPARE, pid=p.pid)
    return Dump(step, file, argv, PY_SPY_CAP, FIRST, retry_on=PY_SPY_RACE, tries=PY_SPY_TRIES, pid=p.pid)


def gdb(tool: str | None, p: Proc, skipped: str = "") -> Dump:
    step, file = f"gdb {_named(p)}", f"gdb-{p.pid}.txt"
    if tool is None:
        return Dump(step, file, None, GDB_CAP, AFTER_METRICS, skipped or f"gdb not installed: {INSTALL['gdb']}")
    argv = (tool, "-nx", "-batch", "-iex", "set debuginfod enabled off", "-p", str(p.pid),
            "-ex", "set pagination off", "-ex", "info threads", "-ex", "thread apply all bt")
    return Dump(step, file, argv, GDB_CAP, AFTER_METRICS, fails_on=GDB_FAILED, pid=p.pid, polite=False)


def plan(procs: Sequence[Proc], tools: Tools) -> list[Dump]:
    """Every dump of the family, in the order they are taken (phase, then the family's order)."""
    alive = [p for p in procs if p.state not in ("Z", "X")]
    dumps = [py_spy(tools.py_spy, p, skipped=tools.why_skipped("py-spy")) if p.python
             else gdb(tools.gdb, p, tools.why_skipped("gdb")) for p in alive]
    if tools.py_spy is not None:  # a stopped process cannot be suspended: --native would only fail
        dumps += [py_spy(tools.py_spy, p, native=True) for p in alive if p.python and p.state != "T"]
    nvidia = (tools.nvidia_smi, "-q") if tools.nvidia_smi else None
    dumps.append(Dump("nvidia-smi -q", "nvidia-smi.txt", nvidia, NVIDIA_CAP, AFTER_METRICS,
                      "" if nvidia else tools.why_skipped("nvidia-smi") or "no nvidia-smi on this host"))
    return sorted(dumps, key=lambda d: d.phase)
