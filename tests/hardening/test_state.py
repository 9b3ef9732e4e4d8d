"""The state file under abuse, end to end: whatever sits where the state goes, the run gives a verdict
(at worst a WARNING that the state was not saved), never a traceback, a hang or a false CRITICAL."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from check_vllm.memory.statefile import state_path
from check_vllm.memory.target import target_key
from vllm_simulator import Simulator

from .conftest import CRITICAL, FAST, OK, WARNING

HOUR = 3600.0


def _file(state_dir: Path, url: str) -> Path:
    return state_path(state_dir, url)


def _doc(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert doc["format"] == "check_vllm-state" and isinstance(doc["data"], dict)
    return doc


@pytest.fixture
def busy() -> Iterator[Simulator]:
    with Simulator(scenario="busy") as s:
        yield s


# what sits at the state file's path -> what the status must mention
PLANTED: list[tuple[str, Any, str]] = [
    ("empty", b"", "state file corrupt; starting a new baseline"),
    ("corrupt JSON", b'{"format": "check_vllm-state", "vers', "state file corrupt"),
    ("binary", bytes(range(256)) * 4, "state file corrupt"),
    ("JSON but not ours", b'{"hello": "world"}', "state file not ours"),
    ("a JSON list", b"[1, 2, 3]", "state file not ours"),
    ("another format version", {"version": 99}, "state file version 99 is not 1"),
    ("another target's file", {"target": "metrics http://10.0.0.1:8000"}, "belongs to another target"),
    ("too large", b" " * (2 << 20), "state file too large"),
    ("wrong types inside", {"data": {"reading": {"at": "yesterday", "engines": {"0": {"running": "NaN"}}},
                                     "stall": [1, 2], "verdict": "busy", "unresponsive": 5, "probe": None}}, ""),
    ("NaN and huge numbers inside", {"data": {"reading": {"at": 1e308, "engines": {"0": {"steps": 1e308}}},
                                              "stall": {"0": {"since": -1e308, "count": 1e308}}}}, ""),
]


def _plant(path: Path, what: Any, sim: Simulator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(what, bytes):
        path.write_bytes(what)
        return
    doc = {"format": "check_vllm-state", "version": 1, "target": target_key(sim.url, "metrics"), "written": time.time(),
           "data": {}}
    doc.update(what)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("what,note", [(w, n) for _, w, n in PLANTED], ids=[i for i, _, _ in PLANTED])
def test_bad_state_costs_one_baseline(check, tmp_path, busy, what, note):
    path = _file(tmp_path / "state", busy.url)
    _plant(path, what, busy)
    r = check("-u", busy.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert note in r.status, r.out
    doc = _doc(path)  # replaced by a good one
    assert doc["target"] == target_key(busy.url, "metrics")
    time.sleep(0.4)
    r = check("-u", busy.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
    assert (r.code, r.word) == (OK, "busy") and "state file" not in r.status, r.out


def test_missing_state_is_a_first_reading(check, busy):
    r = check("-u", busy.url, *FAST)
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert "state file" not in r.status


def test_directory_where_the_state_goes(check, tmp_path, busy):
    path = _file(tmp_path / "state", busy.url)
    path.mkdir(parents=True)
    r = check("-u", busy.url, *FAST)
    assert (r.code, r.word) == (WARNING, "busy"), r.out
    assert "state file is not a regular file" in r.status and "state not saved" in r.status, r.out


def test_fifo_where_the_state_goes_does_not_hang(check, tmp_path, busy):
    path = _file(tmp_path / "state", busy.url)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    r = check("-u", busy.url, "-t", "5", *FAST)
    # no clock: a run blocked on the FIFO (nothing ever writes to it) would end at -t, UNKNOWN, never OK busy
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert "not a regular file" in r.status
    assert path.is_file() and not path.is_symlink()  # the FIFO was replaced by a real state file


#: Root reads any file whatever its mode; without these two capabilities it obeys the mode like anyone.
AS_ORDINARY_USER = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()


def test_unreadable_state_file(check, tmp_path, busy):
    path = _file(tmp_path / "state", busy.url)
    _plant(path, {}, busy)
    path.chmod(0)
    r = check("-u", busy.url, *FAST, prefix=AS_ORDINARY_USER)
    assert r.word == "busy" and "state file unreadable" in r.status, r.out


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """No file can be created in `directory`, even by root (chattr +i), else by mode 0555."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(directory)],
                                                        capture_output=True).returncode:
            pytest.skip("running as root without chattr +i: cannot make a directory read-only")
        undo = ["chattr", "-i", str(directory)]
    else:
        directory.chmod(0o555)
        undo = ["chmod", "0755", str(directory)]
    try:
        with pytest.raises(OSError):
            (directory / "probe-write").touch()
        yield
    finally:
        subprocess.run(undo, check=True)


def test_read_only_state_directory_from_the_start(check, tmp_path, busy):
    state = tmp_path / "state"
    with read_only(state):
        for _ in range(2):
            r = check("-u", busy.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
            assert (r.code, r.word) == (WARNING, "busy"), r.out  # the verdict, and why the next is blind
            assert "state not saved: cannot open state lock" in r.status, r.out
            time.sleep(0.4)


def test_state_directory_turns_read_only(check, tmp_path, busy):
    r = check("-u", busy.url, *FAST)
    assert r.code == OK
    with read_only(tmp_path / "state"):
        time.sleep(0.4)
        r = check("-u", busy.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
        assert (r.code, r.word) == (WARNING, "busy"), r.out
        assert "tok/s" in r.status and "state not saved: cannot write state" in r.status, r.out


@pytest.mark.parametrize("where", ["state", "lock"])
def test_planted_symlink_is_not_followed(check, tmp_path, busy, where):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path = _file(tmp_path / "state", busy.url)
    path.parent.mkdir(parents=True)
    link = path if where == "state" else path.with_suffix(".lock")
    link.symlink_to(victim)
    for run in range(2):
        r = check("-u", busy.url, *FAST)
        assert r.word == "busy", r.out
        if where == "lock":  # never replaced: every run works without the lock and says so
            assert r.code == WARNING and "state not saved" in r.status and "is a symlink" in r.status, r.out
        elif run == 0:  # read as nothing, then replaced by a real file
            assert r.code == OK and "is a symlink; not following it" in r.status, r.out
        time.sleep(0.4)
    assert victim.read_text() == "precious\n"
    if where == "state":
        assert not path.is_symlink() and _doc(path)  # replaced the link itself, never wrote through it


# --------------------------------------------------------------------------- time


def _shift(path: Path, by: float) -> None:
    """Move every timestamp in the state by `by` seconds: -X looks exactly like the clock jumping +X."""
    doc = json.loads(path.read_text())
    data = doc["data"]
    for holder, key in ((data.get("reading"), "at"), (data.get("verdict"), "at"), (data.get("probe"), "at"),
                        (data.get("unresponsive"), "since")):
        if isinstance(holder, dict) and key in holder:
            holder[key] += by
    for s in (data.get("stall") or {}).values():
        s["since"] += by
    doc["written"] += by
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("jump", [3 * HOUR, -3 * HOUR, 50 * 60.0, -50 * 60.0],
                         ids=["forward 3 h", "back 3 h", "forward 50 min", "back 50 min"])
def test_clock_jump_between_runs_on_a_busy_server(check, tmp_path, busy, jump):
    args = ("-u", busy.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
    assert check(*args).word == "busy"
    _shift(_file(tmp_path / "state", busy.url), -jump)
    time.sleep(0.4)
    for _ in range(2):
        r = check(*args)
        assert (r.code, r.word) == (OK, "busy"), r.out
        for label in ("tokens_per_second", "steps_per_second"):
            assert r.perf[label] == "U" or float(r.perf[label]) >= 0
        time.sleep(0.4)


@pytest.mark.parametrize("jump", [3 * HOUR, -3 * HOUR], ids=["forward 3 h", "back 3 h"])
def test_clock_jump_does_not_make_a_stall_stuck(check, tmp_path, jump):
    """A stall of a few seconds must not become hours old (or younger than zero) because the clock moved."""
    with Simulator(scenario="stuck") as sim:
        args = ("-u", sim.url, "--stuck-readings", "3", "--stuck-seconds", "120", *FAST)
        assert check(*args).word == "stalling"
        _shift(_file(tmp_path / "state", sim.url), -jump)
        time.sleep(0.4)
        for _ in range(3):
            r = check(*args)
            assert (r.code, r.word) == (WARNING, "stalling"), r.out
            time.sleep(0.4)


def test_state_from_before_a_host_reboot(check, tmp_path):
    """Yesterday's unresponsive streak must not make today's first 5xx CRITICAL."""
    with Simulator(scenario="http_500") as sim:
        args = ("-u", sim.url, "--stuck-seconds", "120", *FAST)
        r = check(*args)
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        path = _file(tmp_path / "state", sim.url)
        doc = json.loads(path.read_text())
        doc["data"]["unresponsive"] = {"since": time.time() - 30 * HOUR, "count": 40}
        doc["data"]["verdict"]["at"] = time.time() - 24 * HOUR
        path.write_text(json.dumps(doc))
        time.sleep(0.4)
        r = check(*args)
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        assert "1 readings in a row" in r.status or "1 reading" in r.status, r.out


def test_state_from_before_a_host_reboot_with_a_stall(check, tmp_path):
    with Simulator(scenario="stuck") as sim:
        args = ("-u", sim.url, "--stuck-readings", "2", "--stuck-seconds", "120", *FAST)
        assert check(*args).word == "stalling"
        _shift(_file(tmp_path / "state", sim.url), -24 * HOUR)
        time.sleep(0.4)
        r = check(*args)
        assert (r.code, r.word) == (WARNING, "stalling"), r.out
        assert r.code != CRITICAL


def test_a_frozen_server_is_not_called_busy_from_a_baseline_that_cannot_be_replaced(check, tmp_path, busy):
    """The state directory turns read-only, then the engine freezes: comparing with the last saved
    reading (from before the freeze) would show progress run after run ('busy', falling tok/s)."""
    assert check("-u", busy.url, *FAST).code == OK
    busy.set_scenario("stuck")
    with read_only(tmp_path / "state"):
        time.sleep(0.4)
        for _ in range(2):
            r = check("-u", busy.url, *FAST)
            assert (r.code, r.word) == (WARNING, "stalling"), r.out
            assert "tok/s" not in r.status and "judged on this run alone" in r.status, r.out


def test_a_full_state_file_system_is_said_and_judged_alone(check, tmp_path, busy):
    state = tmp_path / "state"
    state.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", str(state)],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        assert check("-u", busy.url, *FAST).code == OK  # the baseline fits
        with open(state / "filler", "wb") as fh:  # then the file system fills up
            with contextlib.suppress(OSError):
                fh.write(b"x" * (1 << 20))
        busy.set_scenario("stuck")
        r = check("-u", busy.url, *FAST)
        assert (r.code, r.word) == (WARNING, "stalling"), r.out
        assert "No space left on device" in r.status and "tok/s" not in r.status, r.out
    finally:
        subprocess.run(["umount", str(state)], check=True)


def test_temp_files_left_by_a_killed_save_are_swept_by_the_next(check, tmp_path, busy):
    """A save killed between its temp file and the rename leaves `.tmp-*.json` beside the state: the next
    save removes the stale ones, and leaves a fresh one (a concurrent save's) alone."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    stale, fresh = state / ".tmp-killed01.json", state / ".tmp-running.json"
    for f in (stale, fresh):
        f.write_bytes(b'{"format": "check_vllm-state", "ver')
    old = time.time() - 3600
    os.utime(stale, (old, old))
    r = check("-u", busy.url, *FAST)
    assert r.code == OK, r.out
    assert not stale.exists() and fresh.exists()
