"""The state directory's files, read and written safely: only a regular file of ours (or of whom root writes
for) is read, and no more than MAX_BYTES of it; a file is written whole (a temp file, fsync, rename), never
through a planted symlink, and what a killed save left behind is swept."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from check_vllm.memory import statedir

MAX_BYTES = 1 << 20  # a state file is a few KB; anything bigger is not ours


def read_regular(fd: int, directory: Path) -> bytes | OSError | str:
    """Up to MAX_BYTES + 1 bytes of the open file `fd` (closed here), why it is not to be read (not a
    regular file: a directory, a FIFO, a device planted where the file goes; another user's, planted in
    `directory`), or the OSError reading it raised."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        planted = statedir.foreign(st, directory)
        if planted:
            return planted
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            return fh.read(MAX_BYTES + 1)
    except OSError as err:
        return err
    finally:
        if fd >= 0:
            os.close(fd)


#: A temp file of write_json older than this was left by a save that was killed (a save takes milliseconds).
STALE_TMP = 60.0


def _sweep(directory: Path) -> None:
    """Remove write_json temp files that a save killed mid-way (SIGKILL, power loss) left in `directory`:
    only regular files of ours (our name pattern, our uid), older than STALE_TMP, so a concurrent save's
    file is never touched. Best effort: a sweep that fails must not fail the save."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    cutoff = time.time() - STALE_TMP
    for entry in entries:
        if not (entry.name.startswith(".tmp-") and entry.name.endswith(".json")):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:
            pass


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Atomically: a 0600 temp file beside `path`, fsync, rename. A planted symlink is replaced, not followed.
    Temp files left by an earlier save that was killed are swept first."""
    body = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    _sweep(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        statedir.hand_over(fd, path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
