"""A dumper attached to one of the server's processes (py-spy, gdb; issue 51): run as the server's own user where
the kernel lets that user attach (a root handler's dumper then holds no more rights than the server), as root
again when that user is refused; and the process never left stopped. PTRACE_ATTACH queues a SIGSTOP in every
thread; a tracer killed before it has taken them all (gdb at its time-out: 11 of 12 tries on 3000 threads) leaves
them to be delivered once the kernel detaches, and the whole process stops for good: the restart's stop command
waits out its own time-out, and a process that is not restarted stays stopped."""

from __future__ import annotations

import os
import signal
import time

from check_vllm.postmortem import dumpers, refusal
from check_vllm.postmortem.dumpers import Ran
from check_vllm.postmortem.procs import read
from check_vllm.postmortem.stacks import Dump

#: Yama's setting: 0 or absent, a process may attach to any of its own user's; 1 and up, only with
#: CAP_SYS_PTRACE (or as its ancestor), which a dumper run as the server's user does not hold.
YAMA = "/proc/sys/kernel/yama/ptrace_scope"
#: The states of a process stopped before its dump (by a signal, by a tracer): left as they are.
STOPPED = ("T", "t")
#: SIGSTOP's bit in /proc's SigPnd and ShdPnd masks.
SIGSTOP_BIT = 1 << (signal.SIGSTOP - 1)
#: How long a process is watched after SIGCONT (sent again while it shows stopped), and how often.
RESUME_TIME = 0.3
RESUME_EVERY = 0.05
ROOT = (0, 0)


def ptrace_scope() -> int | None:
    said = read(YAMA, 16).strip()
    return int(said) if said.isdigit() else None


def _field(status: str, name: str) -> list[str]:
    return next((line.split()[1:] for line in status.splitlines() if line.startswith(name + ":")), [])


def user_of(pid: int) -> tuple[tuple[int, int] | None, str]:
    """Whom a root handler runs a dumper of `pid` as ((uid, gid); None: as itself), and why root when the
    server's user may not attach. The kernel lets a user attach to a process whose real, effective and saved
    uids and gids are all its own; a set-id one, or root's, only root may attach."""
    if os.geteuid() != 0:
        return None, ""
    status = read(f"/proc/{pid}/status")
    uids, gids = {*_field(status, "Uid")}, {*_field(status, "Gid")}
    if len(uids) != 1 or len(gids) != 1 or not all(i.isdigit() for i in uids | gids) or uids == {"0"}:
        return None, ""
    if scope := ptrace_scope():
        return ROOT, f"Yama's ptrace_scope {scope}: only root may attach to uid {uids.pop()}'s process"
    return (int(uids.pop()), int(gids.pop())), ""


def state(pid: int) -> str:
    """The process's state letter (its main thread's); "" when it is gone."""
    raw = read(f"/proc/{pid}/stat", 4096)
    fields = raw[raw.rfind(")") + 2:].split() if ")" in raw else []
    return fields[0] if fields else ""


def stopped(pid: int, pending: bool = False) -> bool:
    """Any of its threads stopped by a signal (T) or, with `pending`, holding a SIGSTOP not yet delivered."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        status = read(f"/proc/{pid}/task/{tid}/status")
        if (_field(status, "State") or ["?"])[0] == "T":
            return True
        masks = [_field(status, name) for name in ("SigPnd", "ShdPnd")] if pending else []
        if any(int(m[0], 16) & SIGSTOP_BIT for m in masks if m):
            return True
    return False


def resume(pid: int, why: str) -> str:
    """SIGCONT to `pid` once the dumper that was `why` (killed, failed) is dead: it drops the SIGSTOPs still
    pending in every thread and ends a group stop. Sent again while a thread shows stopped, for RESUME_TIME; what
    the step says of it ("" when the process was not stopped)."""
    had = stopped(pid, pending=True)
    until = time.monotonic() + RESUME_TIME
    while True:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            return ""  # gone
        time.sleep(RESUME_EVERY)
        if not stopped(pid):
            return f"process {pid} resumed (SIGCONT): the {why} dumper had left it stopped" if had else ""
        had = True
        if time.monotonic() > until:
            return f"process {pid} still stopped after SIGCONT for {RESUME_TIME} s"


def _attempt(dump: Dump, timeout: float, user: tuple[int, int] | None, held: bool) -> Ran:
    """One run, and the process resumed after it when it was killed or failed (unless `held`: stopped before)."""
    ran = dumpers.run(list(dump.argv or ()), timeout, user, dump.polite)
    failed = not ran.ok or any(w.encode() in ran.output for w in dump.fails_on)
    if held or not failed or ran.denied or dump.pid is None:  # denied: it never started
        return ran
    note = resume(dump.pid, "killed" if ran.killed else "failed")
    return Ran(ran.output, f"{ran.outcome}; {note}" if note else ran.outcome, ran.ok, ran.denied, ran.killed)


def _noted(ran: Ran, note: str) -> Ran:
    return Ran(ran.output, f"{ran.outcome}; {note}", ran.ok, ran.denied, ran.killed) if note else ran


def run(dump: Dump, timeout: float) -> Ran:
    """Run `dump` for at most `timeout` seconds: as its process's user where it can, once more as root when that
    user is refused (could not start the tool, or the attach was refused); the outcome says as whom."""
    if dump.pid is None:
        return dumpers.run(list(dump.argv or ()), timeout, polite=dump.polite)
    deadline = time.monotonic() + timeout
    held = state(dump.pid) in STOPPED  # an operator's SIGSTOP, a frozen engine, a debugger's: left as it is
    user, why_root = user_of(dump.pid)
    ran = _attempt(dump, timeout, user, held)
    refused = ran.denied or refusal.refused(ran.output)
    if user is None or user == ROOT or not refused or deadline - time.monotonic() < 0.2:
        return _noted(ran, why_root)
    first = ran.outcome if not ran.ok else \
        f"refused as uid {user[0]}: {dumpers.why(ran.output, ('denied', 'not permitted'))}"
    return _noted(_attempt(dump, deadline - time.monotonic(), ROOT, held), f"first run: {first}")
