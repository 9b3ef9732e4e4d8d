"""An engine paused on purpose (issue 29) end to end: the installed check against the simulator's `paused`
scenario (an RL trainer's POST /pause?mode=keep: work frozen, GET /is_paused true). Never CRITICAL, never
restarted by the handler, never sent a completion; readiness fails (no new work), liveness passes; a real stall
afterwards is still stuck."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.rig.scripts import Result, run_script
from vllm_simulator import Simulator

from .conftest import FAST

ARGS = ("--stuck-seconds", "2", "--stuck-readings", "2", *FAST)


def handler(url: str, state: Path, counter: Path) -> Result:
    return run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3",
                      "--url", url, "--state-dir", str(state), "--", sys.executable, "-c",
                      f"open({str(counter)!r}, 'a').write('x\\n')")


def test_a_paused_engine_is_paused_never_stuck_nor_restarted_and_a_stall_after_it_is(sim: Simulator, run_check,
                                                                                    tmp_path: Path):
    sim.set_scenario("paused")
    seen = []
    for _ in range(6):  # past --stuck-seconds and --stuck-readings several times over
        r = run_check("-u", sim.url, *ARGS)
        seen.append(r)
        handler(sim.url, tmp_path / "state", tmp_path / "restarts")
        time.sleep(0.5)
    assert all(r.code == 0 for r in seen), [r.first for r in seen]
    assert [r.word for r in seen[1:]] == ["paused"] * 5, [r.first for r in seen]
    assert seen[-1].status.startswith("paused: its server says the engine is paused (GET /is_paused) for "), seen[-1].out
    assert not (tmp_path / "restarts").exists()  # the handler never restarted it
    assert sim.inference_requests() == []
    ready = run_check("--probe", "readiness", "-u", sim.url, *ARGS)
    live = run_check("--probe", "liveness", "-u", sim.url, *ARGS)
    assert (ready.code, live.code) == (1, 0), ready.out + live.out
    sim.set_scenario("stuck")  # resumed, and then a real hang: proven from its own start
    words = []
    for _ in range(8):
        time.sleep(0.5)
        words.append(run_check("-u", sim.url, *ARGS).word)
        if words[-1] == "stuck":
            break
    assert words[-1] == "stuck" and "paused" not in words, words


def test_a_server_without_the_pause_route_is_asked_once_per_process(sim: Simulator, run_check):
    sim.set_scenario("stuck")
    for _ in range(4):
        run_check("-u", sim.url, *ARGS)
        time.sleep(0.5)
    asked = [q for q in sim.requests() if q.path == "/is_paused"]
    assert len(asked) == 1, [q.path for q in sim.requests()]  # a 404: not a dev-mode server, remembered
