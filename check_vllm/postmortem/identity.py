"""Whose processes a post-mortem may dump (issue 51): the server's, proven by the listening socket it holds, never
by a command line alone. The handler runs as root and ptraces what is named here: any local user can start a
program called `llama-server --port 8080`, none can hold the port the real server holds. So the process dumped
holds the URL's listening socket (or, behind a proxy, the port the host's witness resolved, held in the
process's own network namespace); a --pid-file or --pid-command PID is taken only when it or a descendant holds
it (a stale pid file whose pid was reused names another program); another user's process only when
--server-user names that user."""

from __future__ import annotations

import os
from typing import NamedTuple

from check_vllm.contract.defaults import Options
from check_vllm.contract.safe_text import clean
from check_vllm.machine.thishost import is_local
from check_vllm.server import host, procfs
from check_vllm.server.processes import api_port, engine_of


class Named(NamedTuple):
    """The server's top process (its descendants are the collector's to add) and how it was proven; or no pid
    and why none may be dumped."""

    pids: list[int]
    how: str


def _parents() -> dict[int, int]:
    out = {}
    for pid in procfs.pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read(4096)
            out[pid] = int(raw[raw.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _descendants(pid: int, parents: dict[int, int]) -> list[int]:
    """`pid` and every process below it, parents first."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        here = todo.pop(0)
        if here not in found:
            found.append(here)
            todo.extend(sorted(children.get(here, [])))
    return found


def _tops(held: list[int], parents: dict[int, int]) -> list[int]:
    """The holders none of whose ancestors holds the socket too (a server's workers share their parent's)."""
    def ancestors(pid: int) -> set[int]:
        seen: set[int] = set()
        while (pid := parents.get(pid, 0)) > 1 and pid not in seen:
            seen.add(pid)
        return seen
    return sorted(p for p in held if not ancestors(p) & set(held))


def _ports(url: str, options: Options, pid: int) -> set[int]:
    """The ports the server's process may hold: the URL's, --server-port, and (its own network namespace: a
    container published on another port) the one its command line says it serves."""
    ports = {host.url_port(url)} | ({options.server_port} if options.server_port else set())
    told = api_port(procfs.cmdline(pid), f"/proc/{pid}/cwd") if engine_of(procfs.cmdline(pid)) else None
    return ports | ({told} if told else set())


def _holding(pid: int, ports: set[int], parents: dict[int, int]) -> int | None:
    """The first of `pid` and its descendants that holds a listening socket on one of `ports`."""
    return next((p for p in _descendants(pid, parents) if procfs.listening(p, ports) is not None), None)


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _allowed(named: Named, options: Options) -> Named:
    """Another user's process (not this one's, not root's when this is root) only when --server-user names it."""
    if not named.pids:
        return named
    pid, me, owner = named.pids[0], os.geteuid(), _owner(named.pids[0])
    user = host.uid_of(options.server_user) if options.server_user else None
    if owner is None:
        return Named([], f"process {pid} is gone")
    if owner == me or owner == user:
        return named
    return Named([], f"process {pid} holds the server's port but belongs to uid {owner}, not to this user (uid {me}): "
                     f"not dumped; name the server's user with --server-user to have it dumped")


def server(url: str, options: Options) -> Named:
    """The server's top process to dump, proven by its socket, or why none is."""
    return _allowed(_named(url, options), options)


def _named(url: str, options: Options) -> Named:
    parents = _parents()
    if options.pid_file or options.pid_command:
        seen = host.witness(url, options)
        if seen is None or seen.process is None:
            return Named([], (seen.error if seen else "") or "the pid file or command names no live process")
        pid, source = seen.process.pid, "--pid-file" if options.pid_file else "--pid-command"
        ports = _ports(url, options, pid)
        if _holding(pid, ports, parents) is None:
            return Named([], f"process {pid} named by {source} holds no listening socket on port "
                             f"{', '.join(map(str, sorted(ports)))}, nor does a child of it: not dumped (a stale pid "
                             f"file whose pid was reused, or another program)")
        return Named([pid], f"named by {source}, holding the server's port")
    if not is_local(url):
        return Named([], "the URL's host is not this host: no process to dump here")
    port = options.server_port or host.url_port(url)
    tops = _tops(procfs.holders(port), parents)
    if tops and (options.server_port or any(engine_of(procfs.cmdline(p)) for p in tops)):
        return Named(tops[:1], f"holding port {port}")
    seen = host.witness(url, options, 502 if tops else None)  # behind a proxy: the one --server-user names
    if seen is None or seen.process is None:
        holder = f"port {port} is held by {clean(procfs.name(tops[0]), 40)} (pid {tops[0]})" if tops else \
            f"no process here holds port {port}"
        return Named([], (seen.error if seen else "") or f"{holder}: no engine server to dump")
    pid = seen.process.pid
    held = procfs.listening(pid, _ports(url, options, pid))
    if held is None:
        return Named([], f"process {pid} looks like the server by its command line but holds no listening socket "
                         "on its port: not dumped (any user can start a program by that name)")
    return Named([pid], f"behind the URL's port, holding port {held}")
