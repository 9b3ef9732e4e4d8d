"""Whose the state directory is: the one rule for using it, for handing over what is made in it, and for
trusting what is found in it.

The files in it have predictable names (a hash of the URL), and a restart marker or history another user
plants there would be believed. So a directory another user could write to (group or world writable; the
sticky bit does not help: a name not yet taken can still be made first) or that belongs to another user is
refused. Root is the one exception: it may use the directory of the monitoring user (the .deb's
/var/lib/check_vllm is nagios' own, 0750) where only an administrator could have made it (not in /tmp), and
everything it makes there is handed to that user, so one manual run as root never leaves files the
monitoring user cannot open.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class StateDirRefused(Exception):
    """The state directory is not safe to use; the message says why and what to do."""


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def vet(directory: Path) -> None:
    """Raise StateDirRefused unless `directory` (made here, 0700, when missing) is this user's and no one
    else can write to it; root may use another user's directory, which it then writes for that user.
    An OSError (no such parent, no permission) is the caller's to word: the directory cannot be used at all."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirRefused(f"the state directory {directory} is not a directory")
    me = os.geteuid()
    if st.st_uid != me and me != 0:
        raise StateDirRefused(
            f"refusing the state directory {directory}: it belongs to {_who(st.st_uid)}, not to {_who(me)}, "
            "who could plant a restart marker or history there; give --state-dir a directory of this user's own")
    if st.st_uid != me and not _made_by_an_admin(directory):
        raise StateDirRefused(
            f"refusing the state directory {directory}: it belongs to {_who(st.st_uid)} and sits in a directory "
            "others may write to, where anyone could have made it first; as root, use a directory an administrator "
            "made (like /var/lib/check_vllm) or one of root's own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "everyone" if st.st_mode & stat.S_IWOTH else "its group"
        raise StateDirRefused(
            f"refusing the state directory {directory}: writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}), "
            f"who could plant a restart marker or history there; chmod go-w it or give --state-dir another one")


def _made_by_an_admin(directory: Path) -> bool:
    """Whether another user's directory could only have been made by root: its parent is root's and no one
    else may write to it (/var/lib, not /tmp)."""
    try:
        parent = os.stat(directory.resolve().parent)
    except OSError:
        return False
    return parent.st_uid == 0 and not parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def heir(directory: Path) -> tuple[int, int] | None:
    """(uid, gid) that a file root makes in `directory` goes to: its owner's, when that is another user."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_uid, st.st_gid) if st.st_uid != 0 else None


def hand_over(fd: int, directory: Path) -> None:
    """Give the file open at `fd`, just made in `directory`, to the directory's owner when root made it
    there for another user (best effort: a file system without owners keeps root's)."""
    owner = heir(directory)
    if owner is not None:
        try:
            os.fchown(fd, *owner)
        except OSError:
            pass


def foreign(st: os.stat_result, directory: Path) -> str | None:
    """Why a file found in the state directory is not to be trusted (another user's), or None: ours,
    root's, or, for root, the directory owner's (whom root's own files are handed to)."""
    trusted = {os.geteuid(), 0}
    owner = heir(directory)
    if owner is not None:
        trusted.add(owner[0])
    return None if st.st_uid in trusted else f"belongs to {_who(st.st_uid)}"
