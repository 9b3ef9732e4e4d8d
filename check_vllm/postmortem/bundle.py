"""The post-mortem's directory: one per restart, `<root>/<UTC time>-<server pid>`, 0700, in a root vetted by
the state directory's own rule (check_vllm.memory.statedir: another user's directory, one others may write to
without a private `uid-N` in it, a planted link) and, beyond it, refused as a link itself or below a directory
others may write to without the sticky bit (where anyone could rename it away and put their own in its place),
unless a directory of ours alone lies between (the private `uid-N` of a shared state directory).
Its files are made new (never through a link), 0600, handed to the directory's owner when root makes them,
and the whole bundle holds to a byte allowance: a huge dump is cut, never the next file dropped unsaid."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

from check_vllm.memory import statedir

#: A bundle's name: its UTC time, the server's pid, and a number when two fall in the same second (one more
#: than any other of that second's, removed or not: the order of names is the order they were taken in).
NAME_FORMAT = "%Y%m%dT%H%M%SZ"
NAME = re.compile(r"^(\d{8}T\d{6}Z)-(\d+)(?:-(\d+))?$")
#: Kept aside for the README and collection.json, written last.
LAST_WORDS = 16 << 10
#: No single file takes more than this share of the allowance: one runaway dump leaves room for the rest.
FILE_SHARE = 0.5


class BundleRefused(Exception):
    """The post-mortem root is not safe to write to; the message says why."""


def _open_to_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) and not st.st_mode & stat.S_ISVTX


def _ours_alone(st: os.stat_result) -> bool:
    """A directory of this user's that no one else may enter: nothing done above it reaches below it (a name
    swapped above would be another user's or a link, which the state directory's rule refuses)."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _vet_above(where: Path) -> None:
    """The directories above `where`, from the nearest up to the first of ours alone (a private `uid-N` in a
    shared state directory, as in a kubelet's 2777 emptyDir): none may be one others can rename things in."""
    for above in where.parents:
        try:
            st = os.lstat(above)
        except OSError:
            continue
        if _ours_alone(st):
            return
        if _open_to_others(st):
            raise BundleRefused(
                f"refusing the post-mortem directory {where}: {above} is writable by others without the sticky "
                f"bit (mode {stat.S_IMODE(st.st_mode):04o}), so anyone could move it away and put their own in "
                f"its place; chmod +t or go-w {above}, or choose another directory")


def home(where: Path) -> Path:
    """The vetted directory the bundles go in: `where`, or this user's `uid-N` in it when others share it."""
    where = Path(os.path.abspath(where))
    _vet_above(where)
    try:
        if stat.S_ISLNK(os.lstat(where).st_mode):
            raise BundleRefused(f"refusing the post-mortem directory {where}: it is a symlink; give the real path")
    except FileNotFoundError:
        pass
    mine = statedir.home(where)
    owner = statedir.heir(mine.parent)
    if owner is not None:  # root, in another user's directory (the monitoring user's state directory)
        _handed(mine, owner)
        return mine
    try:
        statedir.vet(mine)
    except statedir.StateDirRefused as exc:
        raise BundleRefused(f"post-mortem directory: {exc}") from None
    return mine


def _handed(directory: Path, owner: tuple[int, int]) -> None:
    """Root's run in the monitoring user's directory: the bundles' directory made 0700 and handed to that user, as
    everything root makes there is, so the user's own runs read and prune it; or found as that user made it."""
    try:
        os.mkdir(directory, 0o700)
        os.chown(directory, *owner)
    except FileExistsError:
        pass
    st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise BundleRefused(f"refusing the post-mortem directory {directory}: it is not a directory check_vllm made "
                            "(a symlink or a file); remove it, or choose another directory")
    if st.st_uid not in (owner[0], 0) or st.st_mode & 0o022:
        raise BundleRefused(f"refusing the post-mortem directory {directory}: it belongs to uid {st.st_uid} with mode "
                            f"{stat.S_IMODE(st.st_mode):04o}, not to the state directory's owner (uid {owner[0]}) "
                            "and writable by no one else")


class Bundle:
    """One restart's directory, made new, and its files, each written once and counted against the allowance."""

    def __init__(self, path: Path, parent: Path, allowance: int):
        self.path = path
        self.parent = parent
        self.left = max(allowance, 0)
        self.files: list[tuple[str, int, bool]] = []  # (name, bytes kept, cut)
        #: What every file passes through before it is cut and written: its secrets masked (postmortem.mask),
        #: set by the collection once it knows the server's processes. None: written as given.
        self.mask: Callable[[bytes], bytes] | None = None

    @classmethod
    def create(cls, where: Path, pid: int, max_bytes: int, now: float | None = None, server: str = "") -> Bundle:
        """A new bundle in `where`, in the server's own directory there when `server` names one (its state key's
        file stem: a host with a server per GPU keeps one root, and each server its own bundles)."""
        parent = home(home(where) / server) if server else home(where)
        stamp = time.strftime(NAME_FORMAT, time.gmtime(time.time() if now is None else now))
        same = [m for m in map(NAME.match, os.listdir(parent)) if m and m.group(1) == stamp]
        first = max((int(m.group(3) or 0) + 1 for m in same), default=0)
        for n in range(first, first + 1000):
            path = parent / (f"{stamp}-{pid}" + (f"-{n}" if n else ""))
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            owner = statedir.heir(parent)
            if owner is not None:
                os.chown(path, *owner)
            return cls(path, parent, max_bytes)
        raise BundleRefused(f"no free bundle name for {stamp}-{pid} in {parent}")

    def write(self, name: str, data: bytes | str, last: bool = False) -> str:
        """Write `name` once (never through a link), cut to its share of what is left; "" or how it was cut.
        Only the `last` files (README, collection.json) may take the part kept aside for them."""
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else bytes(data)
        if self.mask is not None:  # before the cap: a cut never leaves half a secret unmasked
            raw = self.mask(raw)
        room = self.left if last else int(max(self.left - LAST_WORDS, 0) * FILE_SHARE)
        cut = ""
        if len(raw) > room:
            note = f"\n[cut by check_vllm: {len(raw)} bytes, {room} kept: the post-mortem's size cap]\n".encode()
            raw = raw[:max(room - len(note), 0)] + note if room > len(note) else b""
            cut = f"cut to {len(raw)} of {len(data)} bytes by the size cap"
        fd = os.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            statedir.hand_over(fd, self.parent)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        self.left -= len(raw)
        self.files.append((name, len(raw), bool(cut)))
        return cut

    def write_json(self, name: str, value: object, last: bool = False) -> str:
        return self.write(name, json.dumps(value, indent=2, default=str, ensure_ascii=False) + "\n", last)
