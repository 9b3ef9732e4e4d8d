"""The server connection, made one way for every front end: the check, the agent and a Netdata job give the same
rows (check_vllm.cli.option_table: URL, API key file, CA file, --insecure, the agent's and Netdata's per-request
time-out) and get the same Endpoint, with the key read by one rule and the CA bundle checked at start.

Each front end says how it names a row in its messages (`spell`): `--api-key-file` on a command line,
`api_key_file` in a Netdata job, so a mistake is reported in the words the operator wrote.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from check_vllm.cli.args import UsageError
from check_vllm.cli.option_table import BY_FLAG, Option
from check_vllm.contract.defaults import CONNECT_TIMEOUT

if TYPE_CHECKING:
    from check_vllm.server.fetch import Endpoint

#: An API key is a line: a key file larger than this is not one.
KEY_LIMIT = 16 * 1024
#: A CA bundle is PEM text: the system's whole bundle is ~0.2 MiB.
CA_LIMIT = 4 * 1024 * 1024
#: $VLLM_API_KEY: where the key is when no key file is named (vLLM's own variable for its --api-key).
KEY_ENV = "VLLM_API_KEY"

Spell = Callable[[Option], str]


class Connection(NamedTuple):
    """The connection rows as given, unread: for a front end that reaches the server only now and then (the
    handler's post-mortem), so a call that does not read pays nothing for the key file."""

    url: str
    api_key_file: str | None = None
    ca_file: str | None = None
    insecure: bool = False


def connection_of(values: Any) -> Connection:
    return Connection(values.url, getattr(values, "api_key_file", None), getattr(values, "ca_file", None),
                      bool(getattr(values, "insecure", False)))


def as_flag(row: Option) -> str:
    return row.flag


def as_key(row: Option) -> str:
    return row.dest


def read_bounded(path: Path | str, limit: int) -> bytes:
    """A regular file's bytes, at most `limit`; opened O_NONBLOCK so a FIFO cannot hang a start (a Netdata job has
    no alarm, and a check's would be spent waiting), and refused with a reason."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit // 1024} KiB")
    return data


def read_api_key(path: str | None, spell: Spell = as_flag) -> str | None:
    """The key: the first line of the key file, else $VLLM_API_KEY, else none. One rule everywhere: a leading
    UTF-8 BOM (Notepad writes one) and the white space around the line are not part of the key, a second line is
    ignored, an empty file is a mistake (not "no key"), and a key an HTTP header cannot carry is refused here: it
    would fail inside the client before anything is sent, which must never read as a server that does not answer."""
    from check_vllm.server.fetch_errors import unsendable  # here: a start that reads no key does not import httpx

    name = spell(BY_FLAG["--api-key-file"])
    if path:
        # the path is named only once it is a file: a key given where its file belongs must not be printed
        where = f"{name} {path}" if os.path.lexists(path) else name
        try:
            key = read_bounded(path, KEY_LIMIT).decode("utf-8-sig").partition("\n")[0].strip()
        except OSError as err:
            raise UsageError(f"cannot read {where}: {err.strerror or err}") from None
        except UnicodeDecodeError:
            raise UsageError(f"{where}: not UTF-8 text (UTF-16? save it as UTF-8)") from None
        if not key:
            raise UsageError(f"{where} is empty (leave it out for no key)")
        source = where
    else:
        key, source = os.environ.get(KEY_ENV) or "", f"${KEY_ENV}"
    problem = unsendable(key)
    if problem:
        raise UsageError(f"the API key in {source} cannot be sent: {problem}")
    return key or None


def check_ca_file(path: str, spell: Spell = as_flag) -> str:
    """The PEM text of a CA bundle ssl can load, or a UsageError saying why (read at start: a bad one is ours, not
    the server's). Read as the key file is, bounded and never blocking; the client loads these same bytes."""
    import ssl

    name = f"{spell(BY_FLAG['--ca-file'])} {path}"
    try:
        data = read_bounded(path, CA_LIMIT).decode("ascii")
        ssl.create_default_context(cadata=data)
    except (OSError, ssl.SSLError, UnicodeDecodeError, ValueError) as err:
        why = getattr(err, "reason", None) or getattr(err, "strerror", None) or err
        raise UsageError(f"{name}: not a readable PEM CA bundle ({why})") from None
    return data


def endpoint_from(values: Any, front: str, spell: Spell = as_flag) -> Endpoint:
    """The Endpoint of `front`'s connection rows in `values` (an argparse namespace or a Netdata job): the key
    read, the CA file checked, the per-request time-out where the front end takes one (the check's -t is its whole
    run instead). A UsageError names the row as `spell` does."""
    from check_vllm.server.fetch import Endpoint

    ca_file = getattr(values, "ca_file", None) or None
    ca_data = check_ca_file(ca_file, spell) if ca_file else None
    timeout = values.timeout if front in BY_FLAG["--timeout"].fronts else CONNECT_TIMEOUT
    return Endpoint(values.url, api_key=read_api_key(getattr(values, "api_key_file", None), spell), ca_data=ca_data,
                    insecure=bool(getattr(values, "insecure", False)), connect_timeout=min(timeout, CONNECT_TIMEOUT))


def _stamp(path: str | None) -> tuple[int, int, int] | None:
    """What says a file changed: its inode (a rename over it), size and mtime; None when absent or not given."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class Rotating:
    """The connection of a front end that runs for days (the HAProxy agent, the Netdata job, the probe
    listener): its key and CA files read again when they change, on the same rules as the check's every run, so
    a routine rotation does not leave it refused (401) and blind to a hang for as long as it runs. A new file
    that cannot be used is said, and the connection before it kept."""

    def __init__(self, values: Any, front: str, spell: Spell = as_flag, endpoint: Endpoint | None = None) -> None:
        self.values, self.front, self.spell = values, front, spell
        self.endpoint = endpoint or endpoint_from(values, front, spell)
        self.stamps = self._stamps()

    def _stamps(self) -> tuple[tuple[int, int, int] | None, ...]:
        return tuple(_stamp(getattr(self.values, name, None)) for name in ("api_key_file", "ca_file"))

    def fresh(self) -> tuple[Endpoint, str]:
        """The connection now, and what changed ("": nothing)."""
        stamps = self._stamps()
        if stamps == self.stamps:
            return self.endpoint, ""
        self.stamps = stamps
        try:
            self.endpoint = endpoint_from(self.values, self.front, self.spell)
        except UsageError as err:
            return self.endpoint, f"{err}: the connection before it is kept"
        return self.endpoint, "the API key or CA file changed: read again"
