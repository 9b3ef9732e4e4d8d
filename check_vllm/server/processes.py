"""Which process on this host serves a port: vLLM's API server found by its command line (its --port, or the
port in its --config file), behind a proxy on this host, and what the host cannot see (/proc hidden, another
network namespace, a port it cannot tell), so that finding none is said to be proof only when it is.

Read only when /metrics gave no reading, and only for a URL whose host is this host (check_vllm.server.host).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import Instant, ServerProcess, Witness
from check_vllm.server import clock

#: vLLM's default --port.
DEFAULT_PORT = 8000
#: The API server's module, for `python -m ...` command lines.
API_MODULE = "vllm.entrypoints.openai.api_server"
_CMDLINE_MAX = 64 << 10


def is_api_server(argv: Sequence[str]) -> bool:
    """A command line of vLLM's API server: `vllm serve ...` or `python -m vllm.entrypoints.openai.api_server`."""
    return any(os.path.basename(a) == "vllm" and argv[i + 1:i + 2] == ["serve"] for i, a in enumerate(argv)) \
        or any(a == API_MODULE or a.endswith("/" + API_MODULE.replace(".", "/") + ".py") for a in argv)


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


def config_port(path: str, cwd: str = "/") -> int | None:
    """The port a `vllm serve --config FILE` names (vLLM's documented YAML form); None when it names none or
    the file cannot be read here. A relative path is the server's own (its working directory)."""
    try:
        with open(os.path.join(cwd, path), "rb") as fh:
            found = _YAML_PORT.search(fh.read(_CMDLINE_MAX))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def api_port(argv: Sequence[str], cwd: str = "/") -> int | None:
    """The port a vLLM API server's command line serves: --port, else its --config file's, else vLLM's 8000;
    None when it cannot be told here (a --config file this user cannot read, a --port that is no number)."""
    given, config = _flag(argv, "--port"), _flag(argv, "--config")
    if given is None and config is not None:
        if not os.access(os.path.join(cwd, config), os.R_OK):
            return None
        return config_port(config, cwd) or DEFAULT_PORT
    try:
        return int(given) if given is not None else DEFAULT_PORT
    except ValueError:
        return None


def serves_port(argv: Sequence[str], port: int, cwd: str = "/") -> bool:
    """A command line of vLLM's API server that serves `port` (no --port: its --config file's, else 8000)."""
    return is_api_server(argv) and api_port(argv, cwd) == port


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read(_CMDLINE_MAX)
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _stat_start(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: the start time in clock ticks since boot (after the `(comm)` field,
    which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096)
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process(pid: int, how: str) -> ServerProcess | None:
    """The live process `pid`, with its identity and age; None when it is gone (or a zombie)."""
    ticks = _stat_start(pid)
    if ticks is None or pid <= 0:
        return None
    started = ticks / os.sysconf("SC_CLK_TCK")
    now = clock.now()
    if now.mono is None:  # no boot-time clock here: /proc/uptime is the same clock
        return None
    return ServerProcess(pid, ticks, Instant(now.wall - max(now.mono - started, 0.0), started, now.boot), how)


def _pids() -> Iterable[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return ()
    return (int(n) for n in names if n.isdigit())


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def by_command_line(port: int) -> Witness | None:
    """The oldest vLLM API server process here whose command line (or --config file) serves `port`, in this
    network namespace (the oldest: the parent of a multi-process server; its API server children keep the same
    command line). A port held by another program (a TLS or auth proxy in front of vLLM) makes the host no
    witness (None): it cannot tell which server is behind it, so the check concludes what one from another
    host would; --pid-file or --pid-command name the process. Finding none is proof of none only when the
    host saw all it needs (blind): otherwise a Witness that says what it cannot see."""
    mine, ours, unsure = _netns("self"), [], []
    for pid in _pids():
        argv = _cmdline(pid)
        if pid == os.getpid() or not is_api_server(argv):
            continue
        served, ns = api_port(argv, f"/proc/{pid}/cwd"), _netns(pid)
        if served is None or ns is None or (mine is not None and ns != mine):
            why = "its port cannot be told here" if served is None else "it runs in another network namespace"
            unsure.append(f"vLLM process {pid}: {why}")
        elif served == port:
            ours.append(pid)
    seen = [p for p in (process(pid, "command line") for pid in ours) if p is not None]
    if seen:
        return Witness(min(seen, key=lambda p: p.start_ticks))
    if not unsure and _proxy_on(port):
        return None  # a proxy holds the port: the host cannot tell which vLLM is behind it (a remote check's view)
    why = blind(unsure)
    return Witness(error=f"{why}: no proof there is none (name it with --pid-file or --pid-command)") if why \
        else Witness()


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


def _listeners(port: int) -> set[str]:
    """Socket inodes listening on `port` in this network namespace (/proc/net/tcp, tcp6: state 0A)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                rows = [line.split() for line in fh.read(4 << 20).splitlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) > 9 and row[3] == "0A" and row[1].rpartition(":")[2] == f"{port:04X}":
                inodes.add(row[9])
    return inodes


def _listener_owner(inodes: set[str]) -> str:
    """Which program holds one of these listening sockets: "COMM (pid N)", or "" when this user cannot see."""
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    argv = _cmdline(pid)
                    return "" if is_api_server(argv) else f"{clean(os.path.basename(argv[0]) if argv else '?', 40)} (pid {pid})"
            except OSError:
                continue
    return "a process this user cannot see"


def _proxy_on(port: int) -> bool:
    """A program other than vLLM's API server listens on `port` here (one this user cannot see counts too)."""
    inodes = _listeners(port)
    return bool(inodes) and bool(_listener_owner(inodes))


def blind(unsure: Sequence[str]) -> str:
    """Why finding no vLLM process for the URL's port proves nothing here ("" when it does): /proc hides other
    users' processes, or a vLLM process here has a port that cannot be told (an unreadable --config, another
    network namespace such as a container published with `-p`)."""
    if _hidden_proc():
        return "/proc hides other users' processes here (hidepid)"
    return "; ".join(unsure[:3])
