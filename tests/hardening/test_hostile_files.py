"""No content of the three files the check and the handler share can wedge either of them, end to end.

The state file, the restart marker and the restart history may hold JSON that parses but cannot be
used: nesting deep enough to exhaust the parser's recursion, NaN and Infinity (which json.loads accepts
and the writer refuses), numbers only infinity or a bignum holds, wrong types at any level. Each must
cost a fresh start with a note: the check gives its normal verdict (never UNKNOWN), the next save
replaces the file with a valid one, and the handler still logs exactly one decision line and exits 0.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from check_vllm.memory.marker import marker_path
from check_vllm.memory.statefile import state_path
from check_vllm.memory.target import target_key
from check_vllm.restart.history import history_path
from vllm_simulator import Simulator

from .conftest import CRITICAL, FAST, OK, UNKNOWN, WARNING

Content = Callable[[str, float], bytes]  # (the file's target key, now) -> the bytes planted


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _doc(data: str) -> Content:
    """A state-file envelope that is ours in every respect, around `data` written as raw JSON text
    (so that NaN, Infinity and bignums can be planted exactly as a hand or a bug would write them)."""
    def make(target: str, now: float) -> bytes:
        body = data.replace("NOW", repr(now)).replace("LONG_AGO", repr(now - 5000))
        return (f'{{"format": "check_vllm-state", "version": 1, "target": {json.dumps(target)}, '
                f'"written": {now!r}, "data": {body}}}').encode()
    return make


def _raw(text: str) -> Content:
    return lambda target, now: text.replace("NOW", repr(now)).encode()


BIGNUM = "1" + "0" * 400  # a valid JSON integer; float() of it overflows

STATE = {
    "nested 100000 deep": _raw(_nested(100_000)),
    "nested 900 deep inside the data": _doc(f'{{"verdict": {{"word": "busy", "state": 0, "at": NOW, '
                                            f'"text": {_nested(900)}, "engines": {{}}}}}}'),
    "NaN": _doc('{"reading": {"at": NaN, "engines": {"0": {"running": 2, "steps": NaN}}},'
                ' "verdict": {"word": "busy", "state": 0, "at": NaN, "text": "x", "engines": {}}}'),
    "Infinity": _doc('{"verdict": {"word": "stuck", "state": 2, "at": Infinity, "text": "x", "engines": {}},'
                     ' "stall": {"0": {"since": -Infinity, "count": 1}}}'),
    "a number only infinity holds": _doc('{"verdict": {"word": "stuck", "state": 2, "at": 1e999, "text": "x"}}'),
    "an integer no float holds": _doc(f'{{"verdict": {{"word": "busy", "state": 0, "at": {BIGNUM}, "text": "x"}},'
                                      f' "probe": {{"prompt_tokens": {BIGNUM}, "at": NOW}}}}'),
}

MARKER = {
    "nested 100000 deep": _raw(_nested(100_000)),
    "NaN": _raw('{"restarted_at": NaN, "by": "check_vllm_restart"}'),
    "Infinity": _raw('{"restarted_at": Infinity}'),
    "a number only infinity holds": _raw('{"restarted_at": 1e999}'),
    "an integer no float holds": _raw(f'{{"restarted_at": {BIGNUM}}}'),
    "wrong types": _raw('{"restarted_at": [NOW], "by": {"x": 1}}'),
    "a boolean for a time": _raw('{"restarted_at": true}'),
    "a list for the document": _raw("[NOW]"),
}

HISTORY = {
    "nested 100000 deep": _raw(_nested(100_000)),
    "nested 900 deep inside an entry": _doc(f'{{"restarts": [{{"at": LONG_AGO, "command": {_nested(900)}}}]}}'),
    "NaN": _doc('{"restarts": [{"at": LONG_AGO, "rc": NaN, "seconds": NaN, "done": NaN}]}'),
    "Infinity": _doc('{"restarts": [{"at": -Infinity}, {"at": LONG_AGO, "done": Infinity}]}'),
    "a number only infinity holds": _doc('{"restarts": [{"at": 1e999}]}'),
    "an integer no float holds": _doc(f'{{"restarts": [{{"at": {BIGNUM}, "rc": 0}}]}}'),
    "wrong types for the entries": _doc('{"restarts": [5, "x", null, [1], {"at": "yesterday"}, {"at": true},'
                                        ' {"at": [1]}, {"at": {"t": 1}}]}'),
    "wrong type for the list": _doc('{"restarts": {"at": LONG_AGO}}'),
}


def _plant(path: Path, content: Content, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_bytes(content(target, time.time()))


def _strict(path: Path) -> Any:
    """The file as only a valid one parses: no NaN/Infinity, nothing that overflows."""
    def refuse(text: str) -> Any:
        raise AssertionError(f"{path.name} holds {text}")
    doc = json.loads(path.read_text(), parse_constant=refuse)
    assert json.dumps(doc, allow_nan=False)
    return doc


@pytest.fixture
def busy() -> Iterator[Simulator]:
    with Simulator(scenario="busy") as s:
        yield s


@pytest.fixture
def refused_url() -> str:
    """A loopback port where nothing listens: the real check says CRITICAL down, and the handler may act."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


# --------------------------------------------------------------------------- the check's state file


@pytest.mark.parametrize("content", list(STATE.values()), ids=list(STATE))
def test_unusable_state_file_is_a_fresh_start(check, restart, tmp_path, busy, content):
    path = state_path(tmp_path / "state", busy.url)
    _plant(path, content, target_key(busy.url, "metrics"))

    h = restart(busy.url)  # the handler reads the check's state first: no verdict in it, no restart
    assert (h.code, h.restarts) == (0, 0), h.out
    assert ": no restart: no verdict in the check's state file (state file corrupt" in h.line, h.out

    r = check("-u", busy.url, *FAST)
    assert r.code != UNKNOWN, r.out
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert "state file corrupt; starting a new baseline" in r.status, r.out
    doc = _strict(path)  # the save replaced it
    assert doc["format"] == "check_vllm-state" and doc["data"]["verdict"]["word"] == "busy", doc

    time.sleep(0.4)
    r = check("-u", busy.url, *FAST)
    assert (r.code, r.word) == (OK, "busy") and "state file" not in r.status, r.out
    h = restart(busy.url)
    assert (h.code, h.restarts) == (0, 0) and "'busy'" in h.line, h.out


# --------------------------------------------------------------------------- the restart marker


@pytest.mark.parametrize("content", list(MARKER.values()), ids=list(MARKER))
def test_unusable_restart_marker_is_ignored_until_the_next_restart_replaces_it(check, restart, tmp_path,
                                                                               refused_url, content):
    marker = marker_path(tmp_path / "state", refused_url)
    _plant(marker, content, "")

    r = check("-u", refused_url, *FAST)
    assert (r.code, r.word) == (CRITICAL, "down"), r.out  # the normal verdict: nothing listens
    assert "restart marker corrupt; ignored" in r.status, r.out

    before = time.time()
    h = restart(refused_url)
    after = time.time()
    assert (h.code, h.restarts) == (0, 1) and ": restarted: " in h.line, h.out
    at = _strict(marker)["restarted_at"]  # the handler's restart wrote a good one, dated by it
    assert isinstance(at, float) and before <= at <= after, (before, at, after)

    r = check("-u", refused_url, *FAST)
    assert (r.code, r.word) == (WARNING, "starting"), r.out  # the marker is read again
    assert "marker" not in r.status, r.out


# --------------------------------------------------------------------------- the restart history


@pytest.mark.parametrize("content", list(HISTORY.values()), ids=list(HISTORY))
def test_unusable_restart_history_is_a_fresh_start(check, restart, tmp_path, refused_url, content):
    history = history_path(tmp_path / "state", refused_url)
    _plant(history, content, target_key(refused_url, "restart-history"))
    r = check("-u", refused_url, *FAST)
    assert (r.code, r.word) == (CRITICAL, "down"), r.out

    h = restart(refused_url)  # decides on what is left (nothing usable), says so, and records its restart
    assert h.code == 0, h.out
    assert ": restarted: " in h.line and h.restarts == 1, h.out
    assert ("restart history corrupt; starting afresh" in h.line
            or "unusable restart history entries dropped" in h.line), h.out
    entries = _strict(history)["data"]["restarts"]
    assert len(entries) == 1 and entries[0]["rc"] == 0, entries

    r = check("-u", refused_url, "--start-grace", "0", *FAST)  # down again, not "starting"
    assert (r.code, r.word) == (CRITICAL, "down"), r.out
    h = restart(refused_url)  # the rewritten history is used: the cooldown holds
    assert (h.code, h.restarts) == (0, 1), h.out
    assert "cooldown" in h.line and "restart history" not in h.line, h.out


def test_a_partly_unusable_history_keeps_the_usable_restarts(check, restart, tmp_path, refused_url):
    """Dropping what cannot be used must not drop what can: a recent restart on record still holds the
    cooldown, however much junk sits beside it."""
    history = history_path(tmp_path / "state", refused_url)
    recent = _doc('{"restarts": [{"at": NOW, "rc": 0, "command": "x"}, 5, {"at": "x"}, {"rc": 0},'
                  ' {"at": [NOW]}, {"at": NOW, "rc": "0", "verdict": [1], "seconds": "1", "done": {}}]}')
    _plant(history, recent, target_key(refused_url, "restart-history"))
    r = check("-u", refused_url, *FAST)
    assert (r.code, r.word) == (CRITICAL, "down"), r.out
    h = restart(refused_url)
    assert (h.code, h.restarts) == (0, 0), h.out
    assert ": restart refused: " in h.line and "cooldown" in h.line, h.out
    assert "4 unusable restart history entries dropped" in h.line, h.out
