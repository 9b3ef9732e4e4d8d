"""The one door to the state store (check_vllm.memory.door): what it keeps, when it saves, and how it says a lock
it could not have, in the lock's own words. Files in a temporary directory only; no server, no script."""

from __future__ import annotations

from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory, Remembered
from check_vllm.memory.door import Door
from check_vllm.memory.statefile import StateFile

URL = "http://127.0.0.1:8000"
SEEN = Memory(last=Remembered("idle", 0, "idle", 1.7e9))


def test_a_first_run_keeps_nothing_and_saves_what_it_is_asked_to(tmp_path):
    with Door(tmp_path, URL) as door:
        assert (door.refused, door.busy, door.unlocked, door.unwritable) == ("", "", "", "")
        assert door.kept.memory == Memory() and not door.kept.served_before and door.kept.note == ""
        door.keep(SEEN)
    with Door(tmp_path, URL) as again:
        assert again.kept.memory.last == SEEN.last and again.unsaved == ""


def test_nothing_is_saved_when_the_run_fails_or_is_not_asked(tmp_path):
    try:
        with Door(tmp_path, URL) as door:
            door.keep(SEEN)
            raise RuntimeError("the run's -t")
    except RuntimeError:
        pass
    with Door(tmp_path, URL):
        pass
    assert Door(tmp_path, URL).open().kept.memory == Memory()


def test_a_lock_held_elsewhere_is_busy_in_the_lock_s_words_and_saves_nothing(tmp_path):
    with Door(tmp_path, URL) as first:
        first.keep(SEEN)
    with Door(tmp_path, URL):
        with Door(tmp_path, URL, lock_timeout=0) as second:
            assert second.busy == "another check_vllm run on this target held the state lock for 0 s"
            assert second.kept.memory.last == SEEN.last  # read without the lock, for whether it served
            second.keep(Memory())
    assert Door(tmp_path, URL).open().kept.memory.last == SEEN.last


def test_a_held_door_reopens_under_its_lock_and_close_lets_the_next_in(tmp_path):
    door = Door(tmp_path, URL).open()
    with door:  # the probe's saved verdict looked at, then the session under the same lock
        assert door.busy == ""
        door.keep(SEEN)
    with Door(tmp_path, URL, lock_timeout=0) as next_run:
        assert next_run.busy == "" and next_run.kept.memory.last == SEEN.last


def test_locked_on_another_file_it_reads_the_state_file_and_never_writes_it(tmp_path):
    with Door(tmp_path, URL) as first:
        first.keep(SEEN)
    history = StateFile(tmp_path / "history.json", "history")
    now = Instant(1.7e9 + 5)
    with Door(tmp_path, URL, lock_on=history, now=lambda: now) as door:
        assert door.at == now and door.kept.memory.last == SEEN.last
        door.keep(Memory())
    assert Door(tmp_path, URL).open().kept.memory.last == SEEN.last


def test_the_marker_is_written_read_and_removed_through_the_door(tmp_path):
    at = Instant(1.7e9)
    with Door(tmp_path, URL, now=lambda: at) as door:
        door.mark(at, by="test")
    with Door(tmp_path, URL, now=lambda: at) as door:
        assert door.kept.marker == at and door.kept.note == ""
        door.unmark()
        door.unmark()  # already gone: nothing to say
    assert Door(tmp_path, URL, now=lambda: at).open().kept.marker is None
