"""The bundles kept: the last N, and no more bytes than the cap in all (the oldest go first, the newest is
always kept: its own files were cut to fit), and their listing for `check_vllm_restart --post-mortems`. Only
directories named as the collector names them, of ours, never links, are counted, removed or listed."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import NamedTuple

from check_vllm.contract.safe_text import clean
from check_vllm.memory import statedir
from check_vllm.memory.target import KEY_PREFIX
from check_vllm.postmortem.bundle import NAME, NAME_FORMAT

#: collection.json is ours, and small; a bigger one was not written by the collector.
COLLECTION_MAX = 256 << 10


class Listed(NamedTuple):
    name: str
    when: str
    size: int
    summary: str


def _order(name: str) -> tuple[str, int]:
    m = NAME.match(name)
    assert m is not None
    return m.group(1), int(m.group(3) or 0)


def bundles(parent: Path) -> list[Path]:
    """The bundle directories in `parent`, oldest first: named as ours, real directories, not another user's."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    found = []
    for entry in entries:
        if not NAME.match(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and statedir.foreign(st, parent) is None:
            found.append(Path(entry.path))
    return sorted(found, key=lambda p: _order(p.name))


def size(bundle: Path) -> int:
    """Bytes of the regular files in a bundle (it has no subdirectories; links are not followed)."""
    total = 0
    try:
        for entry in os.scandir(bundle):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


def prune(parent: Path, keep: int, max_bytes: int) -> list[str]:
    """Remove the oldest bundles beyond the last `keep` and while all of them hold more than `max_bytes`; the
    newest stays whatever its size. Returns the names removed."""
    found = bundles(parent)
    gone = found[:max(len(found) - max(keep, 1), 0)]
    kept = found[len(gone):]
    sizes = [size(b) for b in kept]
    while len(kept) > 1 and sum(sizes) > max_bytes:
        gone.append(kept.pop(0))
        sizes.pop(0)
    for bundle in gone:
        shutil.rmtree(bundle, ignore_errors=True)  # fd-based on Linux: a link planted inside is not followed
    return [b.name for b in gone]


def servers(root: Path) -> list[Path]:
    """The servers' own directories under `root` (named as their state files are), real directories of ours."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.startswith(KEY_PREFIX) and stat.S_ISDIR(st.st_mode) and statedir.foreign(st, root) is None:
            found.append(Path(entry.path))
    return found


def cap(root: Path, max_bytes: int) -> list[str]:
    """Hold every server's bundles under `root` together (and those of an earlier version, kept in `root`
    itself) to `max_bytes`: the oldest go first, but never a server's newest (its only evidence)."""
    groups = [bundles(d) for d in servers(root)] + [bundles(root)]
    sized = [(_order(b.name), b, size(b)) for group in groups for b in group[:-1]]
    total = sum(size(group[-1]) for group in groups if group) + sum(n for _, _, n in sized)
    gone = []
    for _, bundle, n in sorted(sized, key=lambda t: t[0]):
        if total <= max_bytes:
            break
        shutil.rmtree(bundle, ignore_errors=True)
        total -= n
        gone.append(bundle.name)
    return gone


def _summary(bundle: Path) -> str:
    """What collection.json says of the bundle in one line, or why it cannot be read."""
    try:
        fd = os.open(bundle / "collection.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return "incomplete: no collection.json (the collection was cut short)"
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return "unreadable collection.json"
            said = json.loads(fh.read(COLLECTION_MAX))
        return clean(str(said.get("summary", "?")), 300)
    except (OSError, ValueError, AttributeError):
        return "unreadable collection.json"


def listing(root: Path) -> list[Listed]:
    """(name, when in UTC, bytes, summary) of each bundle under `root`, oldest first."""
    out = []
    for bundle in bundles(statedir.home(Path(root))):
        stamp = _order(bundle.name)[0]
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.strptime(stamp, NAME_FORMAT))
        out.append(Listed(bundle.name, when, size(bundle), _summary(bundle)))
    return out
