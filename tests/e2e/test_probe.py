"""`check_vllm --probe liveness|readiness|startup` end to end: the installed script against the simulator, the exact
line and exit code a kubelet or Docker reads, and what the server received (issue 28)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.rig.scripts import FAST, script
from vllm_simulator import Simulator

CHECK = script("check_vllm")

PASS, FAIL = 0, 1
REFUSED = "http://127.0.0.1:9"


def one_line(r) -> str:
    """A probe prints exactly one line, and nothing on stderr (the kubelet keeps both in the pod's events)."""
    assert r.out.count("\n") == 1 and r.out.endswith("\n"), r.out
    assert r.err == "", r.err
    return r.out[:-1]


def test_busy_passes_every_probe(sim: Simulator, run_check):
    sim.set_scenario("busy")
    for kind in ("startup", "readiness", "liveness"):
        r = run_check("--probe", kind, "-u", sim.url, *FAST)
        assert r.code == PASS, r.out
        assert re.fullmatch(rf"{kind} pass: busy: .+", one_line(r)), r.out
        time.sleep(0.35)
    assert sim.inference_requests() == []


def test_stalling_passes_liveness_fails_readiness_and_stuck_fails_liveness(sim: Simulator, run_check):
    """--min-gap 2: the probes fired together repeat one verdict even on a loaded machine; the pauses compare."""
    args = ("-u", sim.url, "--stuck-seconds", "0", "--min-gap", "2", "--reread-delay", "2")
    pause = 2.1
    sim.set_scenario("busy")
    run_check(*args)
    time.sleep(pause)
    run_check(*args)
    sim.set_scenario("stuck")
    time.sleep(pause)
    assert run_check(*args).word == "busy"  # the freeze's first reading still moved
    time.sleep(pause)
    live = run_check("--probe", "liveness", *args)
    # within --min-gap it repeats the same verdict; on a slow machine it may come later and read the freeze's
    # proof: readiness fails on either (from the first sign), so the clock decides nothing here
    ready = run_check("--probe", "readiness", *args)
    start = run_check("--probe", "startup", *args)  # it was read: it has served
    assert (live.code, ready.code, start.code) == (PASS, FAIL, PASS), (live.out, ready.out, start.out)
    assert re.fullmatch(r"liveness pass in spite of: WARNING stalling: .+", one_line(live)), live.out
    assert re.fullmatch(r"readiness fail: (WARNING stalling|CRITICAL stuck): .+", one_line(ready)), ready.out
    time.sleep(pause)
    live = run_check("--probe", "liveness", *args)
    assert live.code == FAIL, live.out
    assert re.fullmatch(r"liveness fail: CRITICAL stuck: .+", one_line(live)), live.out
    assert sim.inference_requests() == []


def test_refused_with_nothing_there_is_down_proven(run_check):
    line = f"CRITICAL down: connection refused ({REFUSED})"
    for kind in ("liveness", "readiness", "startup"):
        r = run_check("--probe", kind, "-u", REFUSED, *FAST)
        assert (r.code, one_line(r)) == (FAIL, f"{kind} fail: {line}")


def test_refused_while_its_process_is_young_is_starting_not_proof(run_check, tmp_path: Path):
    young = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "pid").write_text(f"{young.pid}\n")
        args = ("-u", REFUSED, "--pid-file", str(tmp_path / "pid"), *FAST)
        got = {kind: run_check("--probe", kind, *args) for kind in ("liveness", "readiness", "startup")}
    finally:
        young.kill()
        young.wait()
    assert {k: r.code for k, r in got.items()} == {"liveness": PASS, "readiness": FAIL, "startup": FAIL}
    assert one_line(got["liveness"]).startswith(f"liveness pass in spite of: WARNING starting: vLLM process {young.pid} ")
    assert one_line(got["startup"]).startswith("startup fail: WARNING starting: ")


def test_a_state_dir_it_cannot_write_passes_and_says_so(sim: Simulator, run_check, tmp_path: Path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    for url in (sim.url, REFUSED):
        r = run_check("--probe", "liveness", "-u", url, "--state-dir", str(blocked / "state"), *FAST)
        assert r.code == PASS, r.out
        assert one_line(r).startswith("liveness pass in spite of: UNKNOWN state not saved: "), r.out
    assert "; CRITICAL down: connection refused" in r.out


@pytest.mark.parametrize(("args", "why"), [
    (("--bogus",), "usage: unrecognized arguments: --bogus (see --help)"),
    (("-t", "1"), "usage: --timeout must be at least 2 seconds (see --help)"),
    (("-u", "ftp://x"), "usage: "),
])
def test_bad_options_pass(run_check, args, why):
    for kind in ("liveness", "readiness"):
        r = run_check("--probe", kind, *args)
        assert r.code == PASS, r.out
        assert one_line(r).startswith(f"{kind} pass in spite of: UNKNOWN {why}"), r.out


def test_an_unknown_kind_passes(run_check):
    r = run_check("--probe", "bogus")
    assert r.code == PASS
    assert one_line(r).startswith("probe pass in spite of: UNKNOWN usage: argument --probe: invalid choice: 'bogus'")


def test_our_own_time_out_passes_inside_the_budget(sim: Simulator, run_check, tmp_path: Path):
    """A --pid-command that never answers, asked when nothing listens on the URL's port of this host, blocks the
    run outside every request's own time-out (its own is 5 s): only -t ends it."""
    started = time.monotonic()
    r = run_check("--probe", "liveness", "-u", "http://127.0.0.1:9", "-t", "2", "--pid-command", "sleep 30")
    took = time.monotonic() - started
    assert (r.code, one_line(r)) == (PASS, "liveness pass in spite of: UNKNOWN timed out after 2 s waiting for "
                                           "the server's process (the host's witness)")
    # the bound is the product's own figure: -t 2, the run's whole budget, x5 (the line says -t ended it); the pid
    # command's own sleep 30 was not waited out
    assert took < 5 * 2, took


def test_two_probes_at_once_neither_deadlock_nor_both_probe(sim: Simulator, tmp_path: Path):
    """Liveness and readiness fired at the same moment on one state file: one sends the idle probe, the other
    waits for the lock and repeats its verdict (within --min-gap)."""
    state = str(tmp_path / "state")
    procs = [subprocess.Popen([CHECK, "--probe", kind, "-u", sim.url, "--state-dir", state, "-t", "10"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for kind in ("liveness", "readiness")]
    outs = [p.communicate(timeout=30) for p in procs]
    assert [p.returncode for p in procs] == [PASS, PASS], outs
    for (out, err), kind in zip(outs, ("liveness", "readiness"), strict=True):
        assert re.fullmatch(rf"{kind} pass: idle: .+\n", out) and err == "", (out, err)
    assert len(sim.inference_requests()) == 1, sim.requests()


def test_startup_on_a_fault_of_ours_passes_only_if_the_state_file_says_it_served(sim: Simulator, run_check,
                                                                                 tmp_path: Path):
    """The state lock held past its wait (-t 3: one second) is our fault: liveness and readiness pass; startup
    passes on a server the state file saw serving, and fails on one it never saw."""
    import fcntl

    from check_vllm.memory.statefile import state_path

    sim.set_scenario("busy")
    state = tmp_path / "state"
    assert run_check("--probe", "startup", "-u", sim.url, *FAST).code == PASS  # run_check's --state-dir is `state`
    busy = "UNKNOWN another check_vllm run on this target held the state lock for 1 s"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for where, served in ((state, True), (fresh, False)):
        with open(state_path(where, sim.url).with_suffix(".lock"), "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            got = {k: run_check("--probe", k, "-u", sim.url, "--state-dir", str(where), "-t", "3", *FAST)
                   for k in ("liveness", "readiness", "startup")}
        assert {k: r.code for k, r in got.items()} == {"liveness": PASS, "readiness": PASS,
                                                       "startup": PASS if served else FAIL}, got
        assert one_line(got["liveness"]) == f"liveness pass in spite of: {busy}"
        assert one_line(got["startup"]) == (f"startup pass in spite of: {busy} (it served before)" if served
                                            else f"startup fail: {busy} (no reading yet)")
