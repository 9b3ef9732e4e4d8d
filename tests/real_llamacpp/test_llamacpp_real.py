"""The installed check_vllm against a REAL llama.cpp llama-server (b11434, the tiny model as GGUF, `--metrics
--parallel 2 --context-shift`): idle, saturated, the decode loop stopped (mid-decode and between decodes), the
whole process frozen, killed, restarted; and check_vllm_restart deciding on what the check saved.

What the check sent is proven by a recording forwarder in front of the server (llama.cpp counts no requests by
route), and what the engine did by its own counters: `tokens_predicted_total` moves by a request's tokens when it
ends, `n_decode_total` on every decode.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.real_llamacpp.conftest import REPORTS
from tests.rig.forwarder import Recorder
from tests.rig.llamacpp_server import LlamaServer
from tests.rig.scripts import Result, real_runner, run_script

pytestmark = pytest.mark.real_llamacpp

FAST = ("--min-gap", "0.5", "--reread-delay", "1")
#: The stuck proof of these tests: two comparisons spanning 5 s; a run every INTERVAL seconds; -t 4 so that a
#: run against a server that does not answer ends within the interval's order.
STUCK_SECONDS, INTERVAL = 5.0, 1.0
STUCK = ("--stuck-seconds", f"{STUCK_SECONDS:g}", "--stuck-readings", "2", "-t", "4")

Check = Callable[..., Result]


@pytest.fixture
def recorder(server: LlamaServer) -> Iterator[Recorder]:
    rec = Recorder(server.url)
    try:
        yield rec
    finally:
        rec.close()


@pytest.fixture
def check(tmp_path: Path) -> Check:
    return real_runner(tmp_path / "state")


def busy_with(server: LlamaServer, processing: float, deferred: float = 0.0) -> None:
    """Wait until llama.cpp shows this work and its decode counter moves."""
    deadline = time.monotonic() + 60
    while True:
        text = server.metrics_text()
        got = (server.counter("requests_processing", text), server.counter("requests_deferred", text))
        if got == (processing, deferred) and server.counter("n_decode_total", text) > 0:
            return
        assert time.monotonic() < deadline, got
        time.sleep(0.2)


def every_interval(check: Check, url: str, args: tuple[str, ...], done: Callable[[Result], bool],
                   timeout: float = 60.0, interval: float = INTERVAL) -> list[tuple[float, Result]]:
    """Run the check every INTERVAL seconds until `done`: (seconds since the first run started, result)."""
    seen: list[tuple[float, Result]] = []
    start = time.monotonic()
    while True:
        began = time.monotonic()
        r = check(url, *args)
        seen.append((began - start, r))
        if done(r):
            return seen
        assert time.monotonic() - start < timeout, [(round(t, 1), s.first) for t, s in seen]
        time.sleep(max(interval - (time.monotonic() - began), 0.0))


def restart_decision(tmp_path: Path, url: str) -> str:
    """What check_vllm_restart decides on the check's saved verdict (--dry-run: it logs, it runs nothing)."""
    r = run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--url", url,
                   "--state-dir", str(tmp_path / "state"), "--dry-run", "--", "true")
    return r.out + r.err


def test_idle_ok_with_one_probe_answered(server: LlamaServer, check: Check, recorder: Recorder):
    r = check(recorder.url, *FAST)
    assert (r.code, r.word) == (OK, "idle") and r.first.startswith("LLAMACPP OK - idle: probe answered"), r.out
    assert recorder.inference() == [("POST", "/v1/completions")], recorder.seen
    # the probe (max_tokens 1) is the one request the engine finished
    assert server.counter("tokens_predicted_total") == 1, server.metrics_text()
    REPORTS["idle"] = r.first


def test_saturated_is_busy_with_no_inference_request(server: LlamaServer, check: Check, recorder: Recorder):
    with server.load(4) as load:  # 2 slots decoding, 2 requests deferred
        busy_with(server, 2, 2)
        runs = [check(recorder.url, *FAST)]
        time.sleep(0.7)
        runs.append(check(recorder.url, *FAST))
        for r in runs:
            assert (r.code, r.word) == (OK, "busy") and r.first.startswith("LLAMACPP OK - busy: 2 running, 2 waiting"), r.out
            assert "steps/s" in r.status and r.perf["tokens_per_second"] == "U", r.out
        assert recorder.inference() == [], "a saturated server is judged by its page alone"
        assert {p.split("?")[0].rstrip("/") for _, p in recorder.seen} == {"/metrics"}, recorder.seen
        assert not any(load.errors), load.errors
    REPORTS["saturated"] = runs[-1].first


def _stall(server: LlamaServer, check: Check, tmp_path: Path, args: tuple[str, ...]) -> list[tuple[float, Result]]:
    """The decode thread is stopped (by the caller): WARNING, then CRITICAL within --stuck-seconds and one
    interval of the first run that saw it, with /health answering throughout; the handler restarts on it."""
    seen = every_interval(check, server.url, args, lambda r: r.code == CRITICAL, timeout=40)
    shown = [(round(t, 1), r.first) for t, r in seen]
    first_bad = next(i for i, (_, r) in enumerate(seen) if r.code != OK)
    assert seen[first_bad][1].code == WARNING, shown
    assert seen[-1][0] - seen[first_bad][0] <= STUCK_SECONDS + INTERVAL + 4.5, shown  # + one run's -t
    # a ceiling, not a bound: its HTTP thread answered /health later than 2 s once, the load's requests beside it
    health = server.get("/health", timeout=30)
    assert (health.status_code, health.json()) == (200, {"status": "ok"}), "llama.cpp's own health says ok"
    decision = restart_decision(tmp_path, server.url)
    assert "would restart (--dry-run)" in decision, decision
    REPORTS[f"check_vllm_restart on {seen[-1][1].word}"] = decision.strip()
    return seen


def test_decode_loop_stopped_mid_decode_warning_then_critical_and_restartable(server: LlamaServer, check: Check,
                                                                              tmp_path: Path):
    with server.load(2) as load:
        busy_with(server, 2)
        base = check(server.url, *FAST, *STUCK)
        assert (base.code, base.word) == (OK, "busy"), base.out
        with server.decode_stopped():
            seen = _stall(server, check, tmp_path, (*FAST, *STUCK))
            words = [r.word for _, r in seen]
            REPORTS["decode loop stopped mid-work"] = "\n".join(f"{t:5.1f} s  {r.first}" for t, r in seen)
            # llama.cpp yields its queue to /metrics during a decode: mostly the page answers, frozen
            assert set(words) <= {"busy", "stalling", "stuck", "unresponsive"}, words
        back = every_interval(check, server.url, (*FAST, *STUCK), lambda r: r.word == "busy", timeout=30)
        assert back[-1][1].code == OK, back
        assert not any(load.errors), load.errors


def test_decode_loop_stopped_between_decodes_metrics_hang_health_answers(server: LlamaServer, check: Check,
                                                                         tmp_path: Path):
    base = check(server.url, *FAST, *STUCK)
    assert (base.code, base.word) == (OK, "idle"), base.out
    with server.decode_stopped():
        with pytest.raises(httpx.TimeoutException):
            server.get("/metrics", timeout=2)
        seen = _stall(server, check, tmp_path, (*FAST, *STUCK))
        REPORTS["decode loop stopped idle"] = "\n".join(f"{t:5.1f} s  {r.first}" for t, r in seen)
        assert seen[-1][1].word == "unresponsive", seen[-1][1].out
    assert every_interval(check, server.url, (*FAST, *STUCK), lambda r: r.code == OK, timeout=30)


def test_process_frozen_everything_hangs_warning_then_critical(server: LlamaServer, check: Check):
    with server.load(2):
        busy_with(server, 2)
        assert check(server.url, *FAST, *STUCK).word == "busy"
        os.kill(server.pid, signal.SIGSTOP)
        try:
            seen = every_interval(check, server.url, (*FAST, *STUCK), lambda r: r.code == CRITICAL, timeout=40)
            with pytest.raises(httpx.TimeoutException):
                server.get("/health", timeout=1)
        finally:
            os.kill(server.pid, signal.SIGCONT)
    shown = [(round(t, 1), r.first) for t, r in seen]
    assert seen[0][1].code == WARNING and seen[-1][1].word == "unresponsive", shown
    REPORTS["process frozen"] = "\n".join(f"{t:5.1f} s  {r.first}" for t, r in seen)


def test_killed_down_then_restarted_new_baseline_no_critical_while_it_starts(server: LlamaServer, check: Check):
    with server.load(2):
        busy_with(server, 2)
        assert check(server.url, *FAST).word == "busy"
    time.sleep(0.6)
    server.kill()
    down = check(server.url, *FAST)
    assert (down.code, down.word) == (CRITICAL, "down") and down.first.startswith("LLAMACPP CRITICAL - down"), down.out
    server.start(wait=False)
    runs = every_interval(check, server.url, FAST, lambda r: r.word == "restarted", timeout=60, interval=0.05)
    shown = [(round(t, 1), r.first) for t, r in runs]
    assert runs[-1][1].code == OK, shown
    # the host's witness knows llama-server: a process younger than --start-grace is starting, never down
    assert all(r.code != CRITICAL for _, r in runs), shown
    # its Process-Start-Time-Unix header names the new process, whatever its counters did
    assert "new process: counters were re-created" in runs[-1][1].status, shown
    REPORTS["killed, restarted"] = "\n".join([down.first, *(f"{t:5.1f} s  {r.first}" for t, r in runs)])


def test_the_incident_on_llamacpp_the_classic_watchdog_would_restart_a_busy_server(server: LlamaServer, check: Check,
                                                                                    tmp_path: Path):
    """The incident replayed on llama.cpp: four clients on two slots, the classic watchdog (a real chat request with
    a short timeout, 'restart' after consecutive failures; tests/rig/classic_watchdog.py) beside check_vllm. Its
    request waits behind the work and times out: it would restart a healthy server. check_vllm says busy, and
    llama.cpp's own /health says ok, as it also does while the decode loop is stopped (the tests above)."""
    import json
    import subprocess
    import sys

    log = tmp_path / "classic.jsonl"
    with server.load(4):
        busy_with(server, 2, 2)
        classic = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "rig" / "classic_watchdog.py"),
                                    "--url", server.url, "--model", "tiny", "--interval", "1", "--timeout", "2",
                                    "--failures", "3", "--log", str(log)], stdout=subprocess.DEVNULL)
        ours: list[Result] = []
        try:
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline:
                ours.append(check(server.url, *FAST))
                time.sleep(0.7)
        finally:
            classic.terminate()
            classic.wait(10)
        health = server.get("/health", timeout=2).status_code
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(x["would_restart"] for x in lines), lines
    assert all((r.code, r.word) == (OK, "busy") for r in ours), [r.first for r in ours]
    assert health == 200
    REPORTS["the incident on llama.cpp"] = (
        f"classic watchdog: {sum(not x['ok'] for x in lines)} of {len(lines)} chat requests failed "
        f"({', '.join(sorted({x['result'] for x in lines}))}), would restart {lines[-1]['would_restarts']} time(s); "
        f"check_vllm: {len(ours)} runs, all busy; GET /health: {health}")
