"""Whose the state directory is: the one rule for using it, for handing over what is made in it, and for
trusting what is found in it.

The files in it have predictable names (a hash of the URL), and a restart marker or history another user
plants there would be believed. So a directory another user could write to (group or world writable; the
sticky bit does not help: a name not yet taken can still be made first) or that belongs to another user is
refused. Root is the one exception: it may use the directory of the monitoring user (the .deb's
/var/lib/check_vllm is nagios' own, 0750) where only an administrator could have made it (not in /tmp), and
everything it makes there is handed to that user, so one manual run as root never leaves files the
monitoring user cannot open.

A directory others share (a kubelet's emptyDir, 0777 or 2777 with fsGroup; a Docker volume copied from an
image's 1777 directory; /tmp) is not refused but not used either: each runner keeps a private subdirectory
in it (uid-N, made 0700 with mkdir, verified with lstat: its own, not a link, no one else's bits), and never
reads anything else there. A name someone else took first is refused, as a planted file is.
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


def _shared(st: os.stat_result) -> bool:
    """A directory others may make names in: group or world writable."""
    return stat.S_ISDIR(st.st_mode) and bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def private_name() -> str:
    """This runner's subdirectory in a shared directory: one per user, so no user reads another's files."""
    return f"uid-{os.geteuid()}"


def home(directory: Path) -> Path:
    """Where this runner's files go for `--state-dir directory`: the directory itself, or, when others may
    write to it, this user's private subdirectory in it. A directory that cannot be looked at is returned
    as it is: vet() then says why it cannot be used."""
    directory = Path(directory)
    try:
        st = os.stat(directory)
    except OSError:
        return directory
    return directory / private_name() if _shared(st) else directory


def _private(directory: Path) -> bool:
    """Whether `directory` is this user's subdirectory of a shared one (what home() gives for its parent)."""
    if directory.name != private_name():
        return False
    try:
        return _shared(os.stat(directory.parent))
    except OSError:
        return False


def vet(directory: Path) -> None:
    """Raise StateDirRefused unless `directory` (made here, 0700, when missing) is this user's and no one
    else can write to it; root may use another user's directory, which it then writes for that user. A
    private subdirectory of a shared one (home()) must be this user's own, made by mkdir, never a link.
    An OSError (no such parent, no permission) is the caller's to word: the directory cannot be used at all."""
    directory = Path(directory)
    if _private(directory):
        _vet_private(directory)
        return
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


def _vet_private(directory: Path) -> None:
    """This user's subdirectory of a shared directory: made 0700 here, or found made so by this user; anything
    else by that name (a link, a file, another user's directory) was put there by someone else."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(directory)
    me = os.geteuid()
    shared = f"(the shared directory {directory.parent} lets others make names in it)"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise StateDirRefused(f"refusing the state directory {directory}: it is {what}, not the private directory "
                              f"check_vllm makes for {_who(me)} {shared}; remove it, or give --state-dir another one")
    if st.st_uid != me:
        raise StateDirRefused(f"refusing the state directory {directory}: it belongs to {_who(st.st_uid)}, who made "
                              f"it before {_who(me)} could {shared}; remove it, or give --state-dir another one")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise StateDirRefused(f"refusing the state directory {directory}: mode {stat.S_IMODE(st.st_mode):04o}, not "
                              f"0700 as check_vllm makes it in a shared directory; chmod 0700 it")


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
