"""Old state of servers reached from a network namespace that is gone, removed a few at a time.

On Docker each container restart gets a new network namespace, so a new state key and a new file pair in a shared
state volume (check_vllm.memory.target.server_key); nothing else ever removes the old ones. A file is removed only
when its key names another namespace than this run's and it has not been written for STALE seconds: a live
server's check rewrites its file every run, and whether a namespace still exists cannot be seen from inside a
container (another container's processes are not in its /proc). Bounded: at most LOOK files looked at per run, a
window that moves with the clock; a file whose lock is held, or that is not ours, is left alone. Never raises.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from check_vllm.memory.files import MAX_BYTES, read_regular
from check_vllm.memory.statefile import FORMAT, StateError, open_nofollow
from check_vllm.memory.strictjson import parse_json
from check_vllm.memory.target import KEY_PREFIX, network_namespace

#: Seconds a file of another namespace stays untouched before it is taken for a gone container's.
STALE = 2 * 86400.0
#: State files looked at per run.
LOOK = 16


def sweep(home: Path, now: float | None = None) -> list[str]:
    """Remove what is stale of gone namespaces in `home` (a runner's own directory); the names removed."""
    mine = network_namespace()
    try:
        names = sorted(n for n in os.listdir(home) if n.startswith(KEY_PREFIX) and n.endswith(".json"))
    except OSError:
        return []
    now = time.time() if now is None else now
    start = int(now // 60) * LOOK % len(names) if names else 0
    gone = []
    for name in (names[start:] + names[:start])[:LOOK]:
        if _gone(home / name, mine, now):
            gone.append(name)
    return gone


def _gone(path: Path, mine: str | None, now: float) -> bool:
    """Remove the file pair of `path` when it is stale and of another namespace; whether it was removed."""
    try:
        st = os.lstat(path)
        if now - st.st_mtime < STALE:
            return False
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, StateError):  # gone meanwhile, or a symlink: not ours to touch
        return False
    raw = read_regular(fd, path.parent)
    doc = parse_json(raw) if isinstance(raw, bytes) and len(raw) <= MAX_BYTES else None
    target = doc.get("target") if isinstance(doc, dict) and doc.get("format") == FORMAT else None
    if not isinstance(target, str) or " net:[" not in target or (mine is not None and target.endswith(f" {mine}")):
        return False
    return _remove_pair(path)


def _remove_pair(path: Path) -> bool:
    """The state file and its siblings (lock, marker), unless a run holds its lock now."""
    lock = path.with_suffix(".lock")
    try:
        fd = open_nofollow(lock, os.O_RDWR)
    except (OSError, StateError):
        fd = None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for sibling in path.parent.glob(f"{path.stem}.*"):
            sibling.unlink(missing_ok=True)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
