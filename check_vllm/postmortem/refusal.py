"""Why the kernel refused a dumper's attach, and the one setting that allows it (issue 51). py-spy's and gdb's own
words ("Permission Denied", "ptrace: Operation not permitted.") name no cause, and the causes differ by where the
handler runs: a container without CAP_SYS_PTRACE (a pod that drops ALL), Yama's ptrace_scope, another user's
process. The kernel's rules (kernel/ptrace.c __ptrace_may_access, security/commoncap.c, security/yama): the same
real, effective and saved uid, a target whose capabilities are a subset of ours, and Yama's scope (1: only an
ancestor; 2: only CAP_SYS_PTRACE; 3: nobody), each waived by CAP_SYS_PTRACE but scope 3."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from check_vllm.postmortem.procs import read

#: CAP_SYS_PTRACE's bit in the capability masks of /proc/PID/status (linux/capability.h).
CAP_SYS_PTRACE = 19
#: How every explanation begins: the README finds refused dumps by it.
MARK = "refused: ptrace not permitted"
#: The dumpers' words for a refused attach or read: py-spy's "Permission Denied", "Operation not permitted (os
#: error 1)", "Permission denied (os error 13)"; gdb's "ptrace: Operation not permitted.".
REFUSED = re.compile(rb"permission denied|operation not permitted|os error (?:1|13)\b", re.IGNORECASE)
#: EPERM as well, but from another tracer holding the process, not from a permission (gdb says so).
TRACED = b"already traced by"
#: The setting that grants it where the handler is root (a capability added to a container reaches only root's
#: processes: Kubernetes and Docker give a non-root user none).
GRANT = ('allow it with SYS_PTRACE added to the container: securityContext.capabilities.add: ["SYS_PTRACE"] in '
         'the pod, `--cap-add SYS_PTRACE` for docker run, `cap_add: [SYS_PTRACE]` in compose (a systemd unit: '
         'keep CAP_SYS_PTRACE in its CapabilityBoundingSet=)')
AS_ROOT = ("run the handler as root (in a container: a root user with SYS_PTRACE added; a non-root container user "
           "gets no added capability)")


@dataclass(frozen=True)
class Probes:
    """What the kernel decides an attach on: this process's euid and effective capabilities, Yama's scope (None:
    no Yama), the target's real, effective and saved uid ((): unknown), its permitted capabilities and tracer."""
    euid: int
    caps: int
    scope: int | None
    uids: tuple[int, ...] = ()
    target_caps: int = 0
    tracer: int = 0


def refused(output: bytes) -> bool:
    """A dumper's output that says the kernel refused it (not another tracer's hold)."""
    return bool(REFUSED.search(output)) and TRACED not in output


def pid_of(argv: Sequence[str] | None) -> int | None:
    """The process a dumper's command line targets: py-spy's `--pid N`, gdb's `-p N`."""
    args = list(argv or ())
    for i, arg in enumerate(args[:-1]):
        if arg in ("--pid", "-p") and args[i + 1].isdigit():
            return int(args[i + 1])
    return None


def _field(status: str, name: str) -> list[str]:
    return next((line.split()[1:] for line in status.splitlines() if line.startswith(name + ":")), [])


def _mask(status: str, name: str) -> int:
    try:
        return int((_field(status, name) or ["0"])[0], 16)
    except ValueError:
        return 0


def probe(pid: int) -> Probes:
    """The probes, read now: /proc/self/status, /proc/sys/kernel/yama/ptrace_scope, /proc/PID/status."""
    mine, theirs = read("/proc/self/status"), read(f"/proc/{pid}/status")
    scope = read("/proc/sys/kernel/yama/ptrace_scope", 16).strip()
    uids = tuple(int(u) for u in _field(theirs, "Uid")[:3] if u.isdigit())
    if not uids:
        try:
            uids = (os.stat(f"/proc/{pid}").st_uid,)
        except OSError:
            pass
    tracer = _field(theirs, "TracerPid")
    return Probes(os.geteuid(), _mask(mine, "CapEff"), int(scope) if scope.isdigit() else None, uids,
                  _mask(theirs, "CapPrm"), int(tracer[0]) if tracer and tracer[0].isdigit() else 0)


def why(p: Probes) -> str:
    """The cause, the most certain first, and what allows it; one line, naming no pid (one per README)."""
    owner = p.uids[1] if len(p.uids) > 1 else (p.uids[0] if p.uids else None)
    other = any(u != p.euid for u in p.uids)
    if p.tracer:
        return f"{MARK}: process {p.tracer} (a debugger, strace) already traces it: one tracer at a time"
    if p.scope == 3:
        return (f"{MARK}: Yama's kernel.yama.ptrace_scope is 3: no process may attach to another until the host "
                "reboots (the setting can only be raised); the stacks must come from the engine's own dumps")
    if p.caps >> CAP_SYS_PTRACE & 1:
        return (f"{MARK} although CAP_SYS_PTRACE is held here: a seccomp filter or an LSM (AppArmor, SELinux) "
                "forbids ptrace, or the process is in a user namespace this one does not own")
    if other and p.euid != 0:
        fix = f"run the handler as root, or as uid {owner}" if not p.scope else AS_ROOT
        return (f"{MARK}: another user's process (uid {owner}; the handler runs as uid {p.euid}, without "
                f"CAP_SYS_PTRACE): {fix}")
    if other:
        return f"{MARK}: another user's process (uid {owner}) and no CAP_SYS_PTRACE here (root); {GRANT}"
    if p.scope == 2:
        return (f"{MARK}: Yama's kernel.yama.ptrace_scope is 2: only CAP_SYS_PTRACE may attach, and there is none "
                f"here; {GRANT if p.euid == 0 else AS_ROOT}")
    if p.scope == 1:
        fix = GRANT if p.euid == 0 else f"{AS_ROOT}, or set kernel.yama.ptrace_scope=0 on the host (a sysctl)"
        return (f"{MARK}: Yama's kernel.yama.ptrace_scope is 1: a process of the same user may be attached only "
                f"by its ancestors, or with CAP_SYS_PTRACE, and there is none here; {fix}")
    if p.target_caps & ~p.caps:
        return f"{MARK}: the process holds capabilities this one lacks, and no CAP_SYS_PTRACE here; {GRANT}"
    return (f"{MARK}: no CAP_SYS_PTRACE here, and a seccomp filter or an LSM (AppArmor, SELinux) forbids ptrace; "
            f"{GRANT if p.euid == 0 else AS_ROOT}")


def explain(output: bytes, target_pid: int) -> str:
    """Why a dumper with this `output` was refused `target_pid`, and what allows it; "" when it was not refused."""
    return why(probe(target_pid)) if refused(output) else ""
