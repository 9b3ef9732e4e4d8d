"""The vLLM server's process on this host: the only witness of a server that is loading.

vLLM binds its port before it builds the engine and listens only once it serves, so while a model
loads every connection is refused, exactly as for a dead server. Only the host can tell the two apart:
there is an API server process for the URL's port, and it is young. This module finds that process
(by its command line, or the one an operator names with a pid file or a command) and says who it is
(pid, start time, boot) and how old. It is asked only when /metrics gave no reading, and only for a
URL whose host is this host: a check of a remote URL must never take a local process for the server.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import Instant, ServerProcess, Witness
from check_vllm.server import clock

#: vLLM's default --port.
DEFAULT_PORT = 8000
#: The API server's module, for `python -m ...` command lines.
API_MODULE = "vllm.entrypoints.openai.api_server"
#: Seconds a --pid-command may take.
PID_COMMAND_TIMEOUT = 5.0
_CMDLINE_MAX = 64 << 10


def is_local(url: str) -> bool:
    """The URL's host is this host: a loopback name or address, or an address a socket here can bind."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return False
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    return bool(addresses) and all(_bindable(a) for a in addresses)


def _bindable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((str(address), 0))  # EADDRNOTAVAIL for an address that is not this host's
        return True
    except OSError:
        return False


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def serves_port(argv: Sequence[str], port: int) -> bool:
    """A command line of vLLM's API server (`vllm serve ...`, `python -m vllm.entrypoints.openai.api_server`)
    that serves `port` (no --port: vLLM's 8000)."""
    server = any(os.path.basename(a) == "vllm" and argv[i + 1:i + 2] == ["serve"] for i, a in enumerate(argv)) \
        or any(a == API_MODULE or a.endswith("/" + API_MODULE.replace(".", "/") + ".py") for a in argv)
    if not server:
        return False
    given = None
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            given = argv[i + 1]
        elif arg.startswith("--port="):
            given = arg.partition("=")[2]
    try:
        return int(given) == port if given is not None else port == DEFAULT_PORT
    except ValueError:
        return False


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


def by_command_line(port: int) -> ServerProcess | None:
    """The oldest vLLM API server process whose command line serves `port` (the oldest: the parent of a
    multi-process server; its API server children keep the same command line)."""
    found = [pid for pid in _pids() if pid != os.getpid() and serves_port(_cmdline(pid), port)]
    seen = [p for p in (process(pid, "command line") for pid in found) if p is not None]
    return min(seen, key=lambda p: p.start_ticks, default=None)


def _pid_text(text: str, source: str) -> Witness:
    token = text.strip().split()[0] if text.strip() else ""
    if not token.isdigit():
        return Witness(error=f"{source} gave no pid ({clean(text.strip(), 60) or 'empty'})")
    if int(token) == 0:  # `supervisorctl pid NAME` of a stopped program
        return Witness()
    return Witness(process(int(token), source))


def from_pid_file(path: str) -> Witness:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            text = os.read(fd, 64).decode("ascii", "replace")
        finally:
            os.close(fd)
    except FileNotFoundError:
        return Witness()  # no pid file: no server process (it is removed when the server stops)
    except OSError as err:
        return Witness(error=f"pid file {clean(path, 80)}: {err.strerror or err}")
    return _pid_text(text, "pid file")


def from_pid_command(command: str) -> Witness:
    """The pid an operator's command prints (`supervisorctl pid vllm`, `systemctl show -p MainPID --value vllm`)."""
    try:
        done = subprocess.run(command, shell=True, capture_output=True, timeout=PID_COMMAND_TIMEOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        return Witness(error=f"--pid-command took over {PID_COMMAND_TIMEOUT:g} s")
    except OSError as err:
        return Witness(error=f"--pid-command failed: {err.strerror or err}")
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 and not text.strip().isdigit():
        return Witness(error=f"--pid-command exited {done.returncode}: {clean(done.stderr.decode('utf-8', 'replace'), 80)}")
    return _pid_text(text.rpartition("=")[2] if "=" in text else text, "pid command")


def witness(url: str, pid_file: str | None = None, pid_command: str | None = None) -> Witness | None:
    """The server's process; None when the host cannot be a witness (a remote URL, and no name given)."""
    if pid_file:
        return from_pid_file(pid_file)
    if pid_command:
        return from_pid_command(pid_command)
    if not is_local(url):
        return None
    return Witness(by_command_line(url_port(url)))
