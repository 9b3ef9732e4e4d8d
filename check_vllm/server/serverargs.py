"""What an engine's server was told to do, read from where its row says it is told: its command line, its
environment (/proc/PID/environ), a YAML file its command line names. Another user's process names the file and
sets the environment, so both are input: read with a size limit, a file only when it is a regular one of the
server's user or root. Read only when /metrics gave no reading (check_vllm.server.processes, .host)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from check_vllm.contract.engines import Engine

#: A config file is read this far: a server's is a few lines.
CONFIG_MAX = 64 << 10
#: An environment is read this far (the kernel's limit for argv and environ together is a few MiB at most):
#: one that fills it may have lost the variable, so it cannot be told.
ENVIRON_MAX = 4 << 20
#: The environment of a server whose environment is not asked: nothing set.
NO_ENVIRON: Mapping[str, str] = MappingProxyType({})


def flag(argv: Sequence[str], name: str) -> str | None:
    """The last value given to `name` (`--name V` or `--name=V`): the one argparse keeps."""
    given = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            given = argv[i + 1]
        elif arg.startswith(name + "="):
            given = arg.partition("=")[2]
    return given


#: A top-level `port:` line of a --config YAML file (vLLM's and SGLang's keys are the command line's long options).
_YAML_PORT = re.compile(rb"^port\s*:\s*[\"']?(\d{1,5})[\"']?\s*(?:#.*)?$", re.MULTILINE)


def regular_file(path: str, owners: set[int], limit: int = CONFIG_MAX) -> bytes | None:
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


def environ(pid: int) -> Mapping[str, str] | None:
    """The environment process `pid` started with; None when this user may not read it (another user's, not
    root) or it is too long to hold the variable for sure. The first of a repeated name wins, as getenv's."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read(ENVIRON_MAX + 1)
    except OSError:
        return None
    if len(raw) > ENVIRON_MAX:
        return None
    found: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq:
            found.setdefault(name.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return found


def _number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def port(row: Engine, argv: Sequence[str], cwd: str = "/", owner: int | None = None,
         env: Mapping[str, str] | None = NO_ENVIRON) -> int | None:
    """The port `row`'s server with this command line serves, where its row says it is told: --port (the command
    line wins: llama.cpp applies its environment first, vLLM and SGLang their --config first), else the row's
    variable in its environment `env`, else the `port:` of the file its row's config flag names (relative: to
    its working directory `cwd`), else its default. None when it cannot be told here: a port that is no number,
    an environment this user cannot read (`env` None), a config file this user cannot read or that is no
    regular file of the server's user (`owner`) or root. A guessed default would name the wrong process."""
    given = flag(argv, "--port")
    if given is not None:
        return _number(given)
    if row.port_env:
        if env is None:
            return None
        if row.port_env in env:
            return _number(env[row.port_env])
    config = flag(argv, row.config_flag) if row.config_flag else None
    if config is not None:
        raw = regular_file(os.path.join(cwd, config), {0, os.geteuid() if owner is None else owner})
        if raw is None:
            return None
        found = _YAML_PORT.search(raw)
        return int(found.group(1)) if found else row.default_port
    return row.default_port
