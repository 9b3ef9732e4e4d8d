"""What /proc says of this host: its processes, their command lines, and which program holds a listening port
(the sockets of this network namespace in /proc/net/tcp, tcp6, and the process whose descriptor is one).
Read only when /metrics gave no reading."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from check_vllm.contract.safe_text import clean


def pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


#: A command line longer than this is cut: no vLLM's is.
CMDLINE_MAX = 64 << 10


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(CMDLINE_MAX)
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _listeners(port: int, pid: int | str = "self") -> set[str]:
    """Socket inodes listening on `port` in the network namespace of `pid` (this one's by default: its
    /proc/PID/net/tcp, tcp6: state 0A)."""
    inodes = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                rows = [line.split() for line in fh.read(4 << 20).splitlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) > 9 and row[3] == "0A" and row[1].rpartition(":")[2] == f"{port:04X}":
                inodes.add(row[9])
    return inodes


def sockets(pid: int) -> set[str]:
    """The socket inodes process `pid` holds open (none: it holds none, or it is not ours to see)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    held = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            held.add(link[8:-1])
    return held


def listening(pid: int, ports: set[int]) -> int | None:
    """The port among `ports` on which process `pid` itself holds a listening socket, in its own network namespace
    (a container's too); None when it holds none: the proof that it is the server of that port, which its command
    line is not (any user can start a program named like a server)."""
    held = sockets(pid)
    return next((port for port in sorted(ports) if held & _listeners(port, pid)), None) if held else None


def holders(port: int) -> list[int]:
    """The processes holding a socket listening on `port` in this network namespace (several: a server's workers
    share its socket)."""
    inodes = _listeners(port)
    return [pid for pid in pids() if inodes & sockets(pid)] if inodes else []


def name(pid: int) -> str:
    """The program's name as the kernel keeps it (/proc/PID/comm): a command line may be rewritten
    (`nginx: master process ...`), this is not."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read(64).strip() or "?"
    except OSError:
        return "?"


def _listener_owner(inodes: set[str], is_vllm: Callable[[Sequence[str]], bool]) -> str:
    """Which program holds one of these listening sockets: "COMM (pid N)", or "" when this user cannot see."""
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return "" if is_vllm(cmdline(pid)) else f"{clean(name(pid), 40)} (pid {pid})"
            except OSError:
                continue
    return "a process this user cannot see"


def holder(port: int, is_vllm: Callable[[Sequence[str]], bool]) -> str:
    """The program other than vLLM's API server that listens on `port` here ("COMM (pid N)", or "a process
    this user cannot see"), or "" when none does."""
    inodes = _listeners(port)
    return _listener_owner(inodes, is_vllm) if inodes else ""
