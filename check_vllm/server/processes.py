"""Which process on this host serves a port: an engine's server found by its command line (its row's programs;
its --port, or the port in vLLM's --config file), behind a proxy on this host, and what the host cannot see (/proc
hidden, another network namespace, a port it cannot tell), so that finding none is proof only when it is. Read
only when /metrics gave no reading, and only for a URL whose host is this host (check_vllm.server.host).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

from check_vllm.contract.engines import ENGINES, VLLM, Engine
from check_vllm.contract.instants import Instant
from check_vllm.contract.values import ServerProcess, Witness
from check_vllm.server import clock, procfs

#: vLLM's API server's module, for `python -m ...` command lines.
API_MODULE = VLLM.modules[0]
#: A --config file is read this far: vLLM's are a few lines.
CONFIG_MAX = 64 << 10


def engine_of(argv: Sequence[str]) -> Engine | None:
    """The engine whose server this command line runs (None: none of theirs)."""
    return next((row for row in ENGINES if _runs(row, argv)), None)


def is_api_server(argv: Sequence[str]) -> bool:
    """A command line of an engine's server: vLLM's, llama-server, ..."""
    return engine_of(argv) is not None


def _runs(row: Engine, argv: Sequence[str]) -> bool:
    """A command line of `row`'s server: its program, `vllm serve ...`, or `python -m` its module (or its file)."""
    if argv and os.path.basename(argv[0]) in row.programs:
        return True
    return any(os.path.basename(a) in row.serves and argv[i + 1:i + 2] == ["serve"] for i, a in enumerate(argv)) \
        or any(a == m or a.endswith("/" + m.replace(".", "/") + ".py") for a in argv for m in row.modules)


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The last value given to `name` (`--name V` or `--name=V`): the one argparse keeps."""
    given = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            given = argv[i + 1]
        elif arg.startswith(name + "="):
            given = arg.partition("=")[2]
    return given


#: A top-level `port:` line of a vLLM --config YAML file (its keys are the command line's long options).
_YAML_PORT = re.compile(rb"^port\s*:\s*[\"']?(\d{1,5})[\"']?\s*(?:#.*)?$", re.MULTILINE)


def _regular_file(path: str, owners: set[int], limit: int = CONFIG_MAX) -> bytes | None:
    """Up to `limit` bytes of `path` when it is a regular file of one of `owners`, else None. Another user's
    command line names the file, so the file is input: no final symlink followed, and no device or FIFO ever
    opened (opened O_PATH and checked first, then reopened through /proc/self/fd: `--config /dev/watchdog` must
    not arm a watchdog, nor a FIFO block the check)."""
    try:
        handle = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in owners:
            return None
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    finally:
        os.close(handle)
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def api_port(argv: Sequence[str], cwd: str = "/", owner: int | None = None) -> int | None:
    """The port a vLLM API server's command line serves: --port, else the `port:` of its --config file (vLLM's
    documented YAML form), else vLLM's 8000; None when it cannot be told here: a --port that is no number, a
    --config this user cannot read or that is no regular file of the server's user (`owner`) or root. A
    relative --config is the server's own (its working directory)."""
    row = engine_of(argv) or VLLM
    given, config = _flag(argv, "--port"), _flag(argv, "--config") if row is VLLM else None
    if given is None and config is not None:
        raw = _regular_file(os.path.join(cwd, config), {0, os.geteuid() if owner is None else owner})
        if raw is None:
            return None
        found = _YAML_PORT.search(raw)
        return int(found.group(1)) if found else row.default_port
    try:
        return int(given) if given is not None else row.default_port
    except ValueError:
        return None


def serves_port(argv: Sequence[str], port: int, cwd: str = "/") -> bool:
    """A command line of vLLM's API server that serves `port` (no --port: its --config file's, else 8000)."""
    return is_api_server(argv) and api_port(argv, cwd) == port


def _stat_start(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: the start time in clock ticks since boot (after the `(comm)` field,
    which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096)
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process(pid: int, how: str, engine: str = VLLM.name) -> ServerProcess | None:
    """The live process `pid`, with its identity and age; None when it is gone (or a zombie)."""
    ticks = _stat_start(pid)
    if ticks is None or pid <= 0:
        return None
    started = ticks / os.sysconf("SC_CLK_TCK")
    now = clock.now()
    if now.mono is None:  # no boot-time clock here: /proc/uptime is the same clock
        return None
    return ServerProcess(pid, ticks, Instant(now.wall - max(now.mono - started, 0.0), started, now.boot), how, engine)


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _api_servers(user: int | None) -> tuple[dict[int, list[int]], list[str], list[str]]:
    """Every vLLM API server process here, by the port it serves, of `user` only when given (another user's
    processes are not ours to believe), in this network namespace; and what cannot be told of the others:
    those whose port cannot be told here, and those in another network namespace."""
    mine, untold, elsewhere = _netns("self"), [], []
    servers: dict[int, list[int]] = {}
    for pid in procfs.pids():
        argv = procfs.cmdline(pid)
        row = engine_of(argv) if pid != os.getpid() else None
        if row is None:
            continue
        owner = _owner(pid)
        if user is not None and owner != user:
            continue
        served, ns = api_port(argv, f"/proc/{pid}/cwd", owner), _netns(pid)
        if served is None:
            untold.append(f"{row.name} process {pid}: its port cannot be told here")
        elif ns is None or (mine is not None and ns != mine):
            elsewhere.append(f"{row.name} process {pid}: it runs in another network namespace")
        else:
            servers.setdefault(served, []).append(pid)
    return servers, untold, elsewhere


def _oldest(pids: Sequence[int], how: str) -> ServerProcess | None:
    """The oldest live one (the parent of a multi-process server: its API server children share its command line)."""
    seen = [p for p in (process(pid, how, (engine_of(procfs.cmdline(pid)) or VLLM).name) for pid in pids)
            if p is not None]
    return min(seen, key=lambda p: p.start_ticks) if seen else None


#: What a proxy answers while the server behind it does not: nginx 502 or 504, Caddy 502 or 503, HAProxy 503.
GATEWAY = (502, 503, 504)


def by_command_line(port: int, server_port: int | None = None, user: int | None = None,
                    status: int | None = None) -> Witness | None:
    """The vLLM API server process here whose command line (or --config file) serves `port` (or `server_port`,
    the port vLLM listens on behind a proxy that holds the URL's), of `user` when given, in this network
    namespace. When another program holds the URL's port (nginx for TLS or auth), the one vLLM API server of
    this host is the witness, said so; several are named for the operator to choose from; none here makes
    the host no witness (None): the proxy may front another host. `status`: what the URL answered; a proxy's
    (GATEWAY) with no server named gets said what holds the port and how to name the server. Finding none is proof of none only when the
    host saw all it needs (blind): otherwise a Witness that says what it cannot see."""
    servers, untold, elsewhere = _api_servers(user)
    found = _oldest(servers.get(server_port or port, []), "command line")
    if found is not None:
        return Witness(found)
    holder = "" if server_port else procfs.holder(port, is_api_server)
    if holder:
        return _behind(f"port {port} is held by {holder}, not vLLM", servers, untold, elsewhere, user, status)
    why = blind(untold + elsewhere)
    return Witness(error=f"{why}: no proof there is none ({ADVICE})") if why else Witness()


#: How an operator names the server's process where the host cannot tell it.
ADVICE = "name it with --server-user, --server-port, --pid-file or --pid-command"


def _behind(held: str, servers: dict[int, list[int]], untold: list[str], elsewhere: list[str],
            user: int | None, status: int | None) -> Witness | None:
    """The URL's port is another program's (a TLS or auth proxy): the vLLM behind it is this host's to witness
    only when it can be told which, the one API server of the server's user (--server-user) in this network
    namespace; it may as well be on another host, or in a container (then it cannot be told)."""
    if user is None:
        return None if status not in GATEWAY else Witness(
            error=f"{held}: name the server behind it with --server-port or --server-user (or --pid-file, "
                  "--pid-command) for this host to witness its start")
    if untold or (elsewhere and not servers):
        return Witness(error=f"{held}; {blind(untold + elsewhere)}: no proof there is none ({ADVICE})")
    if len(servers) > 1:
        ports = ", ".join(map(str, sorted(servers)))
        return Witness(error=f"{held}, and this user's vLLM API servers here serve ports {ports}: name the one "
                             "behind it with --server-port")
    for served, pids in servers.items():
        found = _oldest(pids, f"command line: the one vLLM API server of its user here, port {served}, "
                              f"behind the URL's: {held}")
        if found is not None:
            return Witness(found)
    return Witness()


def _hidden_proc() -> bool:
    """/proc hides other users' processes from this one (mounted hidepid=1|2|invisible|noaccess, not root)."""
    if os.geteuid() == 0:
        return False
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh.read(1 << 20).splitlines()]
    except OSError:
        return False
    for fields in mounts:
        if len(fields) > 4 and fields[4] == "/proc" and "-" in fields:
            options = ",".join(fields[fields.index("-") + 3:]).split(",")
            if any(o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off") for o in options):
                return True
    return False


def blind(unsure: Sequence[str]) -> str:
    """Why finding no vLLM process for the URL's port proves nothing here ("" when it does): /proc hides other
    users' processes, or a vLLM process here has a port that cannot be told (an unreadable --config, another
    network namespace such as a container published with `-p`)."""
    if _hidden_proc():
        return "/proc hides other users' processes here (hidepid)"
    return "; ".join(unsure[:3])
