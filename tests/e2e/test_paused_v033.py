"""vLLM 0.33/0.34 (issue 37) end to end: the installed check against the simulator answering as those releases do
(vllm_simulator's paused_reject, checkpoint_*, fault_held, deferred_hung, kv_deferred; docs/versions.md cites the
source each is built from). Each case was stuck, or hid a hang, on f646aaa:

- a pause with mode wait/abort (503 "Generation is paused"): was stalling, then stuck CRITICAL; now paused, OK;
- a checkpoint prepared / failed: was stuck CRITICAL; now paused, said as such (failed: WARNING, restart it);
- an engine held for fault recovery: was stuck CRITICAL within vLLM's window; now stalling within it, stuck after;
- an engine hung with its gauges saying every waiting request deferred: was kv transfer WARNING for ever; now
  probed, and stuck CRITICAL once proven."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from tests.rig.scripts import Result, run_script
from vllm_simulator import Simulator

from .conftest import FAST

ARGS = ("--stuck-seconds", "2", "--stuck-readings", "2", "--probe-timeout", "1.5", *FAST)
#: Elapsed times and latencies, the only numbers a run does not fix.
_TIME = re.compile(r"\b\d+(\.\d+)?( s\b|s;)")


def masked(r: Result) -> str:
    """The status line (perfdata dropped) with elapsed times masked."""
    return _TIME.sub(lambda m: "<N>" + m.group(2), r.status)


def runs(sim: Simulator, run_check, scenario: str, count: int, *extra: str) -> list[Result]:
    """A first run on an idle server (a baseline), then `count` runs in `scenario`, half a second apart."""
    run_check("-u", sim.url, *ARGS)
    sim.set_scenario(scenario)
    seen = []
    for _ in range(count):
        time.sleep(0.5)
        seen.append(run_check("-u", sim.url, *ARGS, *extra))
    return seen


def restarts(url: str, state: Path, counter: Path) -> None:
    run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3", "--url", url,
               "--state-dir", str(state), "--", sys.executable, "-c", f"open({str(counter)!r}, 'a').write('x\\n')")


def test_a_pause_that_turns_work_away_is_paused_never_stuck(sim: Simulator, run_check, tmp_path: Path):
    seen = runs(sim, run_check, "paused_reject", 6)
    for _ in seen:
        restarts(sim.url, tmp_path / "state", tmp_path / "restarts")
    assert [(r.code, r.word) for r in seen] == [(0, "paused")] * 6, [r.first for r in seen]
    assert masked(seen[-1]) == ("paused: the engine turns requests away as paused (completion answered HTTP 503: "
                                "Generation is paused. Please retry after it resumes.) for <N> s; 0 running, "
                                "0 waiting"), seen[-1].first
    assert not (tmp_path / "restarts").exists()
    asked = [q.path for q in sim.requests() if q.path == "/checkpoint/status"]
    assert len(asked) == 1  # a 404 (no --enable-sleep-mode): remembered for this process
    ready = run_check("--probe", "readiness", "-u", sim.url, *ARGS)
    live = run_check("--probe", "liveness", "-u", sim.url, *ARGS)
    assert (ready.code, live.code) == (1, 0), ready.out + live.out
    sim.set_scenario("idle")  # resumed: the probe answers, the pause ends
    time.sleep(0.5)
    assert run_check("-u", sim.url, *ARGS).word == "idle"


def test_a_checkpoint_is_said_as_such_and_a_failed_one_plainly(sim: Simulator, run_check):
    prepared = runs(sim, run_check, "checkpoint_prepared", 4)
    assert [(r.code, r.word) for r in prepared] == [(0, "paused")] * 4, [r.first for r in prepared]
    assert masked(prepared[-1]) == ("paused: a checkpoint is prepared, waiting for POST /checkpoint/restore (GET "
                                    "/checkpoint/status: prepared) for <N> s; 0 running, 0 waiting")
    sim.set_scenario("checkpoint_failed")
    time.sleep(0.5)
    failed = run_check("-u", sim.url, *ARGS)
    assert (failed.code, masked(failed)) == (1, (
        "paused: a checkpoint failed (CUDA error: out of memory) (GET /checkpoint/status: failed): the engine turns "
        "every request away for good (vLLM refuses to restore or resume it); restart the server; 0 running, "
        "0 waiting")), failed.first


def test_an_engine_held_for_fault_recovery_is_not_stuck_within_the_window_and_is_after(sim: Simulator, run_check):
    held = runs(sim, run_check, "fault_held", 6)  # past --stuck-seconds and --stuck-readings: stuck, were it not held
    assert [(r.code, r.word) for r in held[1:]] == [(1, "stalling")] * 5, [r.first for r in held]
    assert masked(held[-1]).startswith(
        "stalling: engine 1 unhealthy (RuntimeError) (fault-tolerance status), held for recovery: <N> s of vLLM's "
        "<N> s recovery window, not proven stuck before it ends; engine 1 with 2 running, 2 waiting: no progress "
        "for <N> s over "), held[-1].first
    assert "of vLLM's 120 s recovery window" in held[-1].first  # --recovery-window's default, vLLM's own
    time.sleep(0.5)
    past = run_check("-u", sim.url, *ARGS, "--recovery-window", "1")
    assert (past.code, past.word) == (2, "stuck"), past.first
    assert masked(past).endswith("engine 1 unhealthy (RuntimeError) (fault-tolerance status), past vLLM's <N> s "
                                 "recovery window"), past.first


def test_stale_deferred_gauges_are_probed_and_a_hung_engine_is_proven_stuck(sim: Simulator, run_check):
    hung = runs(sim, run_check, "deferred_hung", 3)
    assert (hung[0].code, hung[0].word, hung[-1].code, hung[-1].word) == (1, "stalling", 2, "stuck"), \
        [r.first for r in hung]
    assert re.fullmatch(r"stuck: no progress for <N> s over \d readings; 0 running, 2 waiting; every waiting "
                        r"request is deferred, and a 1-token probe went unanswered \(POST /v1/completions timed out "
                        r"after <N> s\) with nothing moving", masked(hung[-1])), hung[-1].first


def test_a_live_engine_whose_work_is_deferred_answers_the_probe_and_is_kv_transfer(sim: Simulator, run_check):
    live = runs(sim, run_check, "kv_deferred", 4)
    assert [(r.code, r.word) for r in live] == [(1, "kv transfer")] * 4, [r.first for r in live]
    assert masked(live[-1]) == (
        "kv transfer: every waiting request is deferred (vLLM's transient constraints: a KV transfer from a prefill "
        "instance, a LoRA budget, a blocked status such as a structured-output grammar compiling); probe "
        "answered in <N> s: the engine lives, its waiting work waits on that; 0 running, 2 waiting")
