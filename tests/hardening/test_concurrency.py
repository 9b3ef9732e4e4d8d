"""Ten runs of the check on one target at once (a scheduler catching up after a reload or an outage):
the state stays one valid file, no run crashes or gives up, and no false verdict comes of it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from vllm_simulator import Simulator

from .conftest import OK, WARNING

RUNS = 10


def _storm(check, *args: str) -> list:
    with ThreadPoolExecutor(RUNS) as pool:
        return list(pool.map(lambda _: check(*args), range(RUNS)))


def _state_is_whole(state_dir: Path) -> None:
    files = sorted(p.name for p in state_dir.iterdir())
    assert not [f for f in files if f.startswith(".tmp-")], f"temp files left behind: {files}"
    data = [p for p in state_dir.iterdir() if p.suffix == ".json"]
    assert len(data) == 1, files
    doc = json.loads(data[0].read_text())
    assert doc["format"] == "check_vllm-state" and doc["data"]["reading"]["engines"]


@pytest.mark.parametrize("warm", [False, True], ids=["no state yet", "with state"])
def test_ten_runs_at_once_on_a_busy_server(check, tmp_path, warm):
    with Simulator(scenario="busy") as sim:
        args = ("-u", sim.url, "--stuck-readings", "1", "--stuck-seconds", "0", "--min-gap", "0.3",
                "--reread-delay", "0.4")
        if warm:
            assert check(*args).word == "busy"
        for _ in range(2):
            results = _storm(check, *args)
            assert [(r.code, r.word) for r in results] == [(OK, "busy")] * RUNS, [r.out for r in results]
            _state_is_whole(tmp_path / "state")
        assert sim.inference_requests() == []


def test_ten_runs_at_once_on_a_stalling_server_make_no_stuck(check, tmp_path):
    """Runs closer than --min-gap repeat the last verdict: ten runs in a second are not ten readings."""
    with Simulator(scenario="stuck") as sim:
        results = _storm(check, "-u", sim.url, "--stuck-readings", "2", "--stuck-seconds", "0",
                         "--min-gap", "5", "--reread-delay", "0.4")
        words = sorted({(r.code, r.word) for r in results})
        assert words == [(WARNING, "stalling")], [r.out for r in results]
        _state_is_whole(tmp_path / "state")


def test_ten_runs_at_once_on_an_idle_server_send_one_probe(check, tmp_path):
    with Simulator(scenario="idle") as sim:
        results = _storm(check, "-u", sim.url, "--min-gap", "10")
        assert [(r.code, r.word) for r in results] == [(OK, "idle")] * RUNS, [r.out for r in results]
        assert len(sim.inference_requests()) == 1
        _state_is_whole(tmp_path / "state")
