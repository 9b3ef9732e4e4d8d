"""The installed check_vllm against a REAL vLLM server of each release in the matrix (tiny local model,
--max-num-seqs 2), the scenarios that matter most, in this order per release:

  idle_probe       idle: OK "idle", and the server counted exactly one completion (the 1-token probe)
  saturated_busy   every slot taken, requests queued: OK "busy" twice, and the server counted no request
                   from the check (only the load's own)
  sigstop_stuck    EngineCore SIGSTOPped under load: WARNING "stalling", then CRITICAL "stuck" once
                   --stuck-readings 2 comparisons span --stuck-seconds 2; /health still 200; OK "busy"
                   again after SIGCONT
  restart          stop + start the server: OK "restarted", rates U, the new process probed, then "idle"
  engine_killed    SIGKILL EngineCore: CRITICAL "down" (engine died, then connection refused once the API
                   server has exited; WARNING "stopping" between, where a release closes its listener
                   before it exits, for at most the respawn gap); leaves the server dead

Every run is the console script as a subprocess, asserted on exit code, status word and perfdata syntax;
what the check sent is proven with the server's own counters (see tests/real_vllm/test_check_real.py for
why `http_requests_total{handler=...}` and `vllm:request_success_total` are the right witnesses).
Observations that differ between releases go into tests/fixtures/real/matrix.json (conftest.NOTES).
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.vllm_server import group_members, idle, sample_sum, saturated

from .harness import NOTES, ReleaseServer
from .runs import FAST, GAP, LONG, PAUSE, STUCK, Check, completions, finished, run_until, settled

pytestmark = pytest.mark.real_vllm_matrix

# --------------------------------------------------------------------------- scenarios

def test_idle_probe(release_server: ReleaseServer, check: Check):
    srv = release_server
    before = srv.wait_for(idle, timeout=90)
    r = check(srv.url, *FAST)
    assert (r.code, r.word) == (OK, "idle"), r.out
    assert "probe answered" in r.status and float(r.perf["probe_seconds"]) > 0, r.out
    assert r.perf["running"] == "0" and r.perf["waiting"] == "0", r.out
    after = settled(srv, lambda t: completions(t) >= completions(before) + 1
                    and finished(t) >= finished(before) + 1)
    assert completions(after) - completions(before) == 1, "the idle check must send exactly one completion"
    assert finished(after) - finished(before) == 1
    assert finished(after, "length") - finished(before, "length") == 1  # max_tokens 1
    assert completions(after, "/v1/chat/completions") == completions(before, "/v1/chat/completions")
    NOTES[srv.key]["probe_footprint"] = {
        "completions": completions(after) - completions(before),
        "prompt_tokens": sample_sum(after, "vllm:prompt_tokens_total") - sample_sum(before, "vllm:prompt_tokens_total"),
        "generation_tokens": (sample_sum(after, "vllm:generation_tokens_total")
                              - sample_sum(before, "vllm:generation_tokens_total")),
        "engine_steps": (sample_sum(after, "vllm:iteration_tokens_total_count")
                         - sample_sum(before, "vllm:iteration_tokens_total_count")),
    }
    NOTES[srv.key]["probe_seconds"] = float(r.perf["probe_seconds"])
    time.sleep(GAP + 0.5)
    again = check(srv.url, *FAST)  # its own probe moved the counters: not mistaken for work
    assert (again.code, again.word) == (OK, "idle"), again.out


def test_saturated_busy(release_server: ReleaseServer, check: Check):
    """6 one-shot 1200-token generations (no repeat): the load sends exactly 6 requests, so the server's
    count tells whether the check added any; requests wait for a slot for ~10 s."""
    srv, clients = release_server, 6
    before = srv.wait_for(idle, timeout=90)
    load = srv.load(clients, 1200, ignore_eos=True, repeat=False)
    try:
        srv.wait_for(saturated, timeout=90)
        runs = [check(srv.url, *FAST)]
        time.sleep(GAP + 0.5)
        runs.append(check(srv.url, *FAST))
        for r in runs:
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert "probe_seconds" not in r.perf, r.out
            assert float(r.perf["tokens_per_second"]) > 0 and float(r.perf["steps_per_second"]) > 0, r.out
            assert r.perf["running"] == "2", r.out
        assert int(runs[0].perf["waiting"]) >= 1, runs[0].out
        NOTES[srv.key]["busy_tokens_per_second"] = float(runs[-1].perf["tokens_per_second"])
        assert load.join(240), "the load did not finish"
    finally:
        load.stop()
    assert not any(load.errors), load.errors
    assert load.finished == [1] * clients, load.finished
    want = completions(before) + clients
    after = settled(srv, lambda t: completions(t) >= want and idle(t))
    assert completions(after) == want, "the check sent an inference request to a busy server"
    assert finished(after, "length") - finished(before, "length") == clients
    assert completions(after, "/v1/chat/completions") == completions(before, "/v1/chat/completions")


def test_sigstop_stuck(release_server: ReleaseServer, check: Check):
    srv = release_server
    srv.wait_for(idle, timeout=90)
    engine = srv.engine_core_pid()
    with srv.load(5, LONG, ignore_eos=True, repeat=True) as load:
        srv.wait_for(saturated, timeout=90)
        base = check(srv.url, *STUCK)
        assert (base.code, base.word) == (OK, "busy"), base.out
        before = srv.metrics_text()
        os.kill(engine, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # stats the engine sent just before the stop may still arrive: zero or more "busy" first
            seen = run_until(check, srv.url, STUCK, lambda r: r.word != "busy", pause=PAUSE)
            assert (seen[-1].code, seen[-1].word) == (WARNING, "stalling"), [s.first for s in seen]
            assert "no progress" in seen[-1].status, seen[-1].out
            NOTES[srv.key]["busy_readings_after_sigstop"] = len(seen) - 1
            more = run_until(check, srv.url, STUCK, lambda r: r.word != "stalling", pause=PAUSE)
            stuck = more[-1]
            assert (stuck.code, stuck.word) == (CRITICAL, "stuck"), [s.first for s in more]
            assert len(more) == 1, "stuck-readings 2 over 2 s: the second comparison without progress is stuck"
            assert float(stuck.perf["stalled_seconds"]) >= 2, stuck.out
            assert stuck.perf["running"] == "2" and int(stuck.perf["waiting"]) >= 1, stuck.out
            assert stuck.perf["tokens_per_second"] == "0", stuck.out
            NOTES[srv.key]["sigstop_to_stuck_seconds"] = round(time.monotonic() - stopped, 1)
            assert srv.get("/health", timeout=5).status_code == 200  # only the comparison can see it
            frozen = srv.metrics_text()
            assert completions(frozen) == completions(before), "a completion was sent at the frozen engine"
        finally:
            os.kill(engine, signal.SIGCONT)
        back = run_until(check, srv.url, STUCK, lambda r: r.word == "busy")
        assert back[-1].code == OK and float(back[-1].perf["tokens_per_second"]) > 0, [s.first for s in back]
        assert all(s.word in ("stuck", "busy") for s in back), [s.first for s in back]
        assert not any(load.errors), load.errors
    srv.wait_for(idle, timeout=90)


def test_restart(release_server: ReleaseServer, check: Check):
    srv = release_server
    old = srv.wait_for(idle, timeout=90)
    assert (sample_sum(old, "vllm:generation_tokens_total") or 0) > 0  # earlier scenarios generated plenty
    first = check(srv.url, *FAST)
    assert (first.code, first.word) == (OK, "idle"), first.out
    srv.restart(timeout=240)
    NOTES[srv.key]["restart_seconds"] = round(srv.start_seconds or 0.0, 1)
    fresh = srv.metrics_text()
    if sample_sum(old, "process_start_time_seconds") is not None:
        assert sample_sum(fresh, "process_start_time_seconds") > sample_sum(old, "process_start_time_seconds")
    r = check(srv.url, *FAST)
    assert (r.code, r.word) == (OK, "restarted"), r.out
    assert "new process" in r.status and "new baseline" in r.status, r.out
    why = re.search(r"\): (.+?),? new baseline", r.status)
    NOTES[srv.key]["restart_seen_by"] = why.group(1) if why else r.status
    for label in ("tokens_per_second", "prompt_tokens_per_second", "steps_per_second"):
        assert r.perf[label] == "U", r.out  # never a rate across two processes
    assert "probe answered" in r.status, r.out
    after = settled(srv, lambda t: completions(t) >= 1)
    assert completions(after) == 1 and finished(after, "length") == 1, "one probe at the new process"
    time.sleep(GAP + 0.5)
    again = check(srv.url, *FAST)
    assert (again.code, again.word) == (OK, "idle"), again.out


def test_engine_killed(release_server: ReleaseServer, check: Check):
    """Runs last for its release: the server is dead afterwards (the next release starts its own)."""
    srv = release_server
    args = ("--probe-timeout", "5", *FAST)
    srv.wait_for(idle, timeout=90)
    base = check(srv.url, *args)
    assert (base.code, base.word) == (OK, "idle"), base.out
    os.kill(srv.engine_core_pid(), signal.SIGKILL)
    killed = time.monotonic()
    try:
        seen = run_until(check, srv.url, args, lambda r: r.word == "down" and "connection refused" in r.status)
        # some releases' API servers close their listener and exit when the engine dies, as in a graceful
        # stop: 'stopping' (WARNING, never restartable) while it lives and for the respawn gap after it
        # exits (Settings.respawn_grace), then down; every other reading is CRITICAL
        words = [s.first for s in seen]
        assert all(s.code == CRITICAL or (s.word, s.code) == ("stopping", WARNING) for s in seen), words
        assert {s.word for s in seen} <= {"stuck", "down", "stopping"}, words
        # the API server says its engine died (HTTP 500 to the probe) until it exits, then the port closes
        assert re.search(r"^down: (engine died|connection refused)", seen[-1].status), seen[-1].out
        NOTES[srv.key]["kill_to_down_seconds"] = round(time.monotonic() - killed, 1)
        NOTES[srv.key]["after_kill"] = [s.status.split(" (")[0] for s in seen]
        deadline = time.monotonic() + 30
        while srv.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert srv.proc.poll() is not None, "the API server outlived its engine"
        gone = check(srv.url, *args)
        assert (gone.code, gone.word) == (CRITICAL, "down") and "connection refused" in gone.status, gone.out
        assert all(gone.perf[k] == "U" for k in ("running", "waiting", "tokens_per_second")), gone.out
    finally:
        pgid = srv.pid
        srv.stop()
    assert group_members(pgid) == [], "vLLM processes survived the dead engine"
