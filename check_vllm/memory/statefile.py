"""The small JSON file that carries the memory (check_vllm.memory.codec) from one check run to the next.

Written atomically (temp file, fsync, rename) so a reader never sees half a file; guarded by an
flock on a side file so two runs on one target take turns; versioned, so a file from another
version or target costs one baseline reading, never a false verdict. Symlinks are not followed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Any

from check_vllm.contract.defaults import LOCK_TIMEOUT
from check_vllm.memory import statedir
from check_vllm.memory.files import MAX_BYTES, read_regular, write_json
from check_vllm.memory.strictjson import parse_json
from check_vllm.memory.target import earlier_keys, key_path, legacy_key, target_key

FORMAT = "check_vllm-state"
VERSION = 1


class StateError(Exception):
    """The state could not be locked or saved; the message says why, for the status line."""


class StateBusy(StateError):
    """Another run held the lock for longer than we may wait."""


class StateRefused(StateError):
    """The state directory is not safe to use (statedir.vet): no run may judge or act on what is in it."""


def default_dir(env: dict[str, str] | None = None) -> Path:
    """$MP_STATE_PATH, $NAGIOS_PLUGIN_STATE_DIRECTORY, /var/lib/check_vllm if usable, else XDG."""
    env = dict(os.environ) if env is None else env
    for var in ("MP_STATE_PATH", "NAGIOS_PLUGIN_STATE_DIRECTORY"):
        if env.get(var):
            return Path(env[var]) / "check_vllm" if var == "MP_STATE_PATH" else Path(env[var])
    system = Path("/var/lib/check_vllm")
    if os.access(system, os.W_OK | os.X_OK) or (not system.exists() and os.access(system.parent, os.W_OK)):
        return system
    xdg = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(xdg) / "check_vllm"


def _mode(proxy: bool) -> str:
    """A balancer URL read through /v1/models only keeps a memory apart from the same URL read for /metrics."""
    return "proxy" if proxy else "metrics"


def state_path(state_dir: Path, url: str, proxy: bool = False, legacy: bool = False) -> Path:
    return key_path(state_dir, (legacy_key if legacy else target_key)(url, _mode(proxy)))


def check_file(state_dir: Path, url: str, proxy: bool, lock_timeout: float = LOCK_TIMEOUT) -> StateFile:
    """The state file check_vllm keeps for one target (the handler reads the same one)."""
    earlier = earlier_keys(url, _mode(proxy))
    return StateFile(state_path(state_dir, url, proxy), target_key(url, _mode(proxy)), lock_timeout,
                     legacy=tuple((key_path(state_dir, key), key) for key in earlier))


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise StateError(f"{path} is a symlink; not following it") from None
        raise


def open_lock(path: Path) -> int:
    """The lock file, open for flock. One this user cannot open, another user's (root's, left by a version
    that did not hand its files to the directory's owner), is replaced: the directory is this user's (vetted),
    so the name is too. Without this the one root run locks the monitoring user out until a human steps in."""
    try:
        return open_nofollow(path, os.O_RDWR | os.O_CREAT)
    except PermissionError as err:
        try:
            theirs = os.geteuid() != 0 and os.lstat(path).st_uid != os.geteuid()
        except OSError:
            theirs = False
        if not theirs:
            raise err from None
    os.unlink(path)
    try:
        return open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    except FileExistsError:  # a concurrent run replaced it first: share its lock
        return open_nofollow(path, os.O_RDWR)


class StateFile:
    """Lock, load and save one target's state. Use as a context manager: the lock spans the run."""

    def __init__(self, path: Path, target: str, lock_timeout: float = LOCK_TIMEOUT, what: str = "state file",
                 fresh: str = "starting a new baseline", legacy: tuple[tuple[Path, str], ...] = ()) -> None:
        self.path = Path(path)
        #: Where and under which keys older versions kept this file, newest first: read while ours does not exist.
        self.legacy = legacy
        self.target = target
        self.lock_timeout = lock_timeout
        #: How the notes name this file, and what becomes of a file that cannot be used.
        self.what, self.fresh = what, fresh
        self._lock_fd: int | None = None

    def __enter__(self) -> StateFile:
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    def lock(self) -> None:
        try:
            statedir.vet(self.path.parent)
            fd = open_lock(self.path.with_suffix(".lock"))
        except statedir.StateDirRefused as err:
            raise StateRefused(str(err)) from None
        except OSError as err:
            raise StateError(f"cannot open state lock in {self.path.parent}: {err.strerror}") from None
        statedir.hand_over(fd, self.path.parent)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StateBusy(
                        f"another check_vllm run on this target held the state lock for {self.lock_timeout:.0f} s"
                    ) from None
                time.sleep(0.05)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> tuple[dict[str, Any], str | None]:
        """The saved data, or ({}, why) when there is none usable: the run then takes a baseline.
        Whatever the file holds, this never raises."""
        what, fresh = self.what, self.fresh
        try:
            fd = open_nofollow(self.path, os.O_RDONLY | os.O_NONBLOCK)  # a planted FIFO must not block us
        except FileNotFoundError:
            older = [(path, key) for path, key in self.legacy if Path(path) != self.path]
            if older:
                (path, key), rest = older[0], tuple(older[1:])
                return StateFile(path, key, what=what, fresh=fresh, legacy=rest).load()
            return {}, None
        except (OSError, StateError) as err:
            return {}, f"{what} unreadable ({getattr(err, 'strerror', None) or err})"
        raw = read_regular(fd, self.path.parent)
        if isinstance(raw, str):
            return {}, f"{what} {raw}; ignored"
        if isinstance(raw, OSError):
            return {}, f"{what} unreadable ({raw.strerror})"
        if len(raw) > MAX_BYTES:
            return {}, f"{what} too large; ignored"
        doc = parse_json(raw)
        if doc is None:
            return {}, f"{what} corrupt; {fresh}"
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return {}, f"{what} not ours; {fresh}"
        if doc.get("version") != VERSION:
            version = doc.get("version")
            shown = repr(version) if isinstance(version, int) or (isinstance(version, str) and len(version) < 20) \
                else "unknown"
            return {}, f"{what} version {shown} is not {VERSION}; {fresh}"
        if doc.get("target") != self.target:
            return {}, f"{what} belongs to another target; {fresh}"
        data = doc.get("data")
        return (data, None) if isinstance(data, dict) else ({}, f"{what} corrupt; {fresh}")

    def unwritable(self) -> str | None:
        """Why a save cannot work now (a read-only or full file system, no permission), or None; one
        statvfs, so a run knows before it judges whether its reading can become the next baseline."""
        try:
            fs = os.statvfs(self.path.parent)
        except OSError as err:
            return f"cannot write state in {self.path.parent}: {err.strerror}"
        if fs.f_flag & os.ST_RDONLY:
            return f"cannot write state in {self.path.parent}: Read-only file system"
        if (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) == 0 or fs.f_favail == 0:
            return f"cannot write state in {self.path.parent}: No space left on device"
        if not os.access(self.path.parent, os.W_OK | os.X_OK):
            return f"cannot write state in {self.path.parent}: Permission denied"
        return None

    def save(self, data: dict[str, Any]) -> None:
        doc = {"format": FORMAT, "version": VERSION, "target": self.target, "written": time.time(), "data": data}
        try:
            write_json(self.path, doc)
        except OSError as err:
            raise StateError(f"cannot write state {self.path}: {err.strerror}") from None
        except (ValueError, TypeError, RecursionError) as err:  # NaN or a foreign type in the data: not JSON
            raise StateError(f"cannot write state {self.path}: {err.__class__.__name__}: {str(err)[:80]}") from None

