"""The vLLM server's process on this host: the only witness of a server that is loading.

vLLM binds its port before it builds the engine and listens only once it serves, so while a model
loads every connection is refused, exactly as for a dead server. Only the host can tell the two apart:
there is an API server process for the URL's port, and it is young. This module finds that process
(by its command line, or the one an operator names with a pid file or a command) and says who it is
(pid, start time, boot) and how old. It is asked only when /metrics gave no reading, and only for a
URL whose host is this host: a check of a remote URL must never take a local process for the server.
"""

from __future__ import annotations

import math
import os
import subprocess
from urllib.parse import urlsplit

from check_vllm.contract.defaults import Options
from check_vllm.contract.engines import VLLM
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import ServerProcess, Witness
from check_vllm.machine.thishost import is_local
from check_vllm.server import procfs, serverargs
from check_vllm.server.processes import by_command_line, engine_of, process, server_at

#: Seconds a --pid-command may take.
PID_COMMAND_TIMEOUT = 5.0


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _pid_text(text: str, source: str) -> Witness:
    token = text.strip().split()[0] if text.strip() else ""
    if not token.isdigit():
        return Witness(error=f"{source} gave no pid ({clean(text.strip(), 60) or 'empty'})")
    if int(token) == 0:  # `supervisorctl pid NAME` of a stopped program
        return Witness()
    engine = engine_of(procfs.cmdline(int(token)))  # a wrapper's pid (a shell, a container's init) names none
    return Witness(process(int(token), source, engine.name if engine else VLLM.name))


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


def uid_of(user: str) -> int | None:
    """A user name or number as a uid; None for no such user."""
    if user.isdigit():
        return int(user)
    try:
        import pwd

        return pwd.getpwnam(user).pw_uid
    except (KeyError, ImportError):
        return None


def witness(url: str, options: Options, status: int | None = None) -> Witness | None:
    """The server's process; None when the host cannot be a witness (a remote URL, and no name given).
    `status`: what the URL answered, if it answered (a proxy's 502 is worth a word on what holds the port)."""
    if options.pid_file:
        return from_pid_file(options.pid_file)
    if options.pid_command:
        return from_pid_command(options.pid_command)
    if not is_local(url):
        return None
    user = uid_of(options.server_user) if options.server_user else None
    if options.server_user and user is None:
        return Witness(error=f"--server-user {clean(options.server_user, 40)}: no such user here")
    return by_command_line(url_port(url), options.server_port, user, status)


def idle_sleep(url: str, options: Options) -> float | None:
    """The idle seconds after which the server's process sleeps (its row's sleep flag on its command line): a
    probe after them would wake it. The process is the witness's (named, else this host's by the URL's port or
    --server-port), found with no look at what else holds the port: one /proc scan. None when none is found,
    the URL is not this host's, or it does not sleep (no flag, -1, no positive number). Never raises: it only
    spares a probe."""
    try:
        found: ServerProcess | None = None
        if options.pid_file or options.pid_command:
            seen = witness(url, options)
            found = seen.process if seen else None
        elif is_local(url):
            user = uid_of(options.server_user) if options.server_user else None
            if user is not None or not options.server_user:
                found = server_at(options.server_port or url_port(url), user)
        argv = procfs.cmdline(found.pid) if found else []
        row = engine_of(argv)
        given = serverargs.flag(argv, row.sleep_flag) if row and row.sleep_flag else None
        seconds = float(given) if given is not None else math.nan
    except Exception:  # noqa: BLE001 - a /proc race, a pid command's output: a probe spared is not worth a check
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None
