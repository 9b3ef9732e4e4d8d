"""The one door to a server's state store: its files found by the URL's key, the directory vetted, the lock taken,
what is kept read (the memory, the restart marker, whether the server served before) and, when asked, the memory
saved on the way out. The check's run, the probe's saved verdict, the restart handler and its --status all come in
here, so none of them puts the key, the directory's trust, the files' safety and the lock together again.

A fault of the store is never raised: the door says it (refused, busy, unlocked, unwritable, unsaved), and each
caller words what it does about it. Anything else (the run's -t, a bug) goes up as it came.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from check_vllm.contract.defaults import LOCK_TIMEOUT
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.machine import clock
from check_vllm.memory import codec, prune
from check_vllm.memory.files import write_json
from check_vllm.memory.marker import load_marker, marker_json, marker_path
from check_vllm.memory.statefile import StateBusy, StateError, StateFile, StateRefused, check_file


class Kept(NamedTuple):
    """What the store keeps of a server, as the door found it."""

    memory: Memory = Memory()
    #: When the handler last restarted the server (or is restarting it now), from its marker.
    marker: Instant | None = None
    #: What was wrong with the state file (a corrupt file: a new baseline), and with the marker (ignored).
    state_note: str = ""
    marker_note: str = ""

    @property
    def served_before(self) -> bool:
        """The state file keeps a reading: the server served before."""
        return self.memory.baseline is not None

    @property
    def note(self) -> str:
        return "; ".join(filter(None, (self.state_note, self.marker_note)))


class Door:
    """One server's state store for one run: `with Door(...) as door:`. Where the lock is handed on (a probe's
    saved verdict looked at, then its run under the same lock), open() and close() are the two halves."""

    def __init__(self, state_dir: Path, url: str, proxy: bool = False, lock_timeout: float = LOCK_TIMEOUT,
                 lock_on: StateFile | None = None, now: Callable[[], Instant] = clock.now) -> None:
        self.state = check_file(state_dir, url, proxy, lock_timeout)
        self.marker = marker_path(state_dir, url)
        #: The file whose lock spans the run: the state file, or the handler's restart history (its calls take
        #: turns on it; the check's state file is then read without its lock: saves are atomic renames).
        self.lock_on = lock_on or self.state
        self.now = now
        self.at = Instant(0.0)  # when the lock was had: the run's now
        self.kept = Kept()
        #: Why the store cannot serve this run, each in the lock's own words (empty: it can).
        self.refused = self.busy = self.unlocked = self.unwritable = self.unsaved = ""
        self._locked = False
        self._keep: Memory | None = None

    def __enter__(self) -> Door:
        return self.open()

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(saving=kind is None)

    def open(self) -> Door:
        """Vet the directory and take the lock (unless held already), then read what is kept."""
        if not self._locked:
            try:
                self.lock_on.lock()
                self._locked = True
            except StateRefused as err:  # what is in it may be another user's: read nothing there
                self.refused = str(err)
                return self
            except StateBusy as err:  # read once without the lock, for whether it served (saves are renames)
                self.busy = str(err)
                self.kept = Kept(codec.from_json(self.state.load()[0]))
                return self
            except StateError as err:  # no lock can be made there: what is kept is read, nothing will be saved
                self.unlocked = str(err)
        self.at = self.now()
        saved, note = self.state.load()
        marker, marker_note = load_marker(self.marker, self.at)
        self.kept = Kept(codec.from_json(saved), marker, note or "", marker_note or "")
        if self._locked:  # one statvfs: the run knows before it judges whether its reading can be kept
            self.unwritable = self.state.unwritable() or ""
        return self

    def keep(self, memory: Memory) -> None:
        """Save `memory` on the way out, when the store can take it (locked, writable, no fault on the way)."""
        self._keep = memory

    def close(self, saving: bool = True) -> None:
        """Save what was kept (a failure is `unsaved`), sweep a few files of gone servers, release the lock."""
        try:
            if saving and self._keep is not None and self._locked and self.lock_on is self.state \
                    and not self.unwritable:
                try:
                    self.state.save(codec.to_json(self._keep))
                    prune.sweep(self.state.path.parent)  # gone containers' files, a few a run
                except StateError as err:
                    self.unsaved = str(err)
        finally:
            self._keep = None
            self._locked = False
            self.lock_on.unlock()

    def mark(self, at: Instant, **fields: object) -> None:
        """The restart marker written (the handler's): the check reads a server that does not serve yet as
        starting, not down. OSError when it cannot be."""
        write_json(self.marker, marker_json(at, **fields))

    def unmark(self) -> None:
        """The marker removed: a restart that did not happen must not make a dead server "starting"."""
        try:
            self.marker.unlink()
        except OSError:
            pass
