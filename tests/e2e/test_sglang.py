"""The check against the simulator's SGLang 0.5.23 flavour (read from SGLang's source, not run:
tests/fixtures/source/sglang-0.5.23/README.md): SGLang's work gauges lag (written after a prefill batch, every 40
decode steps, on an idle pass), so idle versus stuck is decided by its counters and the idle probe, never by a
gauge; its /health is a real generation the check never asks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.scripts import FAST
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator
from vllm_simulator.sglang_engine import SglangOptions

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "source" / "sglang-0.5.23"
OPTIONS = SglangOptions(health_poll_seconds=0.05, health_check_timeout=0.4, idle_log_seconds=30.0)
STUCK = ("--stuck-seconds", "2", "--stuck-readings", "2", "--probe-timeout", "1")


@pytest.fixture
def sglang() -> Iterator[Simulator]:
    s = Simulator(port=0, flavour="sglang", sglang=OPTIONS, scenario="idle").start()
    try:
        yield s
    finally:
        s.stop()


def never_asked_health(sim: Simulator) -> bool:
    return not any(r.path in ("/health", "/health_generate") for r in sim.requests())


def test_idle_ok_with_one_probe(sglang: Simulator, run_check):
    r = run_check("-u", sglang.url, *FAST)
    assert (r.code, r.word) == (OK, "idle") and r.first.startswith("SGLANG OK - idle: probe answered"), r.out
    assert [(q.method, q.path) for q in sglang.inference_requests()] == [("POST", "/v1/completions")]
    assert never_asked_health(sglang)


def test_busy_no_inference_request(sglang: Simulator, run_check):
    sglang.set_scenario("busy")
    time.sleep(0.3)
    sglang.clear_requests()
    first = run_check("-u", sglang.url, *FAST)
    time.sleep(0.4)
    second = run_check("-u", sglang.url, *FAST)
    for r in (first, second):
        assert (r.code, r.word) == (OK, "busy") and r.first.startswith("SGLANG OK - busy: "), r.out
    assert float(second.perf["tokens_per_second"]) > 0 and float(second.perf["steps_per_second"]) > 0, second.out
    assert sglang.inference_requests() == [] and never_asked_health(sglang)


def test_frozen_with_lagging_gauges_is_told_by_the_probe_warning_then_critical(sglang: Simulator, run_check):
    sglang.set_scenario("busy")
    time.sleep(0.3)
    assert run_check("-u", sglang.url, *FAST, *STUCK).word == "busy"
    sglang.set_scenario("stuck")
    seen, codes, start, runs = [], [], time.monotonic(), []

    def critical() -> bool:
        time.sleep(0.5)
        runs.append(run_check("-u", sglang.url, *FAST, *STUCK))
        seen.append((round(time.monotonic() - start, 1), runs[-1].first))
        codes.append(runs[-1].code)
        return runs[-1].code == CRITICAL

    # polled, with a ceiling a slow machine never meets (the proof takes a few seconds here)
    wait_for("CRITICAL", critical, 120, interval=0, diag=lambda: "\n".join(f"{t} {line[:150]}" for t, line in seen))
    r = runs[-1]
    # the first run may still see the steps made before the stop; once it warned, never OK again
    first = codes.index(WARNING)
    assert all(c == WARNING for c in codes[first:-1]) and all(c == OK for c in codes[:first]), seen
    assert all(line.startswith("SGLANG ") for _, line in seen), seen
    assert r.word == "stuck" and "probe" in r.status, r.out
    elapsed = seen[-1][0] - seen[first][0]
    # the bound is the product's own figures x5: --stuck-seconds 2 after the first warning, plus one interval (0.5 s)
    # and the run's --probe-timeout 1: proven then, not some longer wait later
    assert elapsed <= 5 * (2 + 0.5 + 1), seen
    print("\n".join(f"{t:5.1f} s  {line[:110]}" for t, line in seen))
    assert never_asked_health(sglang)


def test_idle_with_stale_gauges_is_idle_when_the_probe_answers(run_check):
    """The gauges still say work while nothing moves: a gauge is no proof; the probe answered, so idle."""
    sim = Simulator(port=0, flavour="sglang", sglang=OPTIONS, scenario="busy").start()
    try:
        time.sleep(0.3)
        sim.set_scenario("idle")
        # the flavour's idle pass would correct the gauges after idle_log_seconds (30 s): they lag for this test
        r = run_check("-u", sim.url, *FAST)
        time.sleep(0.4)
        r = run_check("-u", sim.url, *FAST)
        assert (r.code, r.word) == (OK, "idle"), r.out
    finally:
        sim.stop()


def test_dead_is_down_and_restarted_is_a_new_baseline(sglang: Simulator, run_check):
    assert run_check("-u", sglang.url, *FAST).word == "idle"
    sglang.restart()
    time.sleep(0.4)
    r = run_check("-u", sglang.url, *FAST)
    assert (r.code, r.word) == (OK, "restarted") and r.first.startswith("SGLANG OK - restarted"), r.out
    sglang.set_scenario("dead")
    r = run_check("-u", sglang.url, *FAST)
    assert (r.code, r.word) == (CRITICAL, "down") and r.first.startswith("SGLANG CRITICAL - down"), r.out
    assert never_asked_health(sglang)
