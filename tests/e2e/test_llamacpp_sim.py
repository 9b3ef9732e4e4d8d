"""The installed check against the simulator's llama.cpp flavour (llama-server b11434, read from its source and its
recorded pages: tests/fixtures/real/llamacpp/README.md): each engine on its own terms. Its metrics are off without
--metrics (501), it sleeps after --sleep-idle-seconds (and a probe would wake it), its page prints 6 significant
digits (a counter past 10^6 proves no stall), and its process is named by the Process-Start-Time-Unix header. In
router mode (--models-dir) each loaded model is one engine, and the check never makes the router load a model."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.scripts import FAST, Result
from tests.rig.waiting import wait_for
from vllm_simulator import LlamacppOptions, Simulator

STUCK = ("--stuck-seconds", "2", "--stuck-readings", "2", "--probe-timeout", "1")
BIG = 1_200_000_000  # decodes a long-running server has made: n_decode_total prints 1.2e+09


@pytest.fixture
def make_sim() -> Iterator[Callable[..., Simulator]]:
    started: list[Simulator] = []

    def factory(scenario: str = "idle", **options: object) -> Simulator:
        sim = Simulator(port=0, flavour="llamacpp", scenario=scenario,
                        llamacpp=LlamacppOptions(**options)).start()  # type: ignore[arg-type]
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


def posts(sim: Simulator) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in sim.requests() if r.method == "POST"]


def until_critical(sim: Simulator, run_check: Callable[..., Result], *args: str) -> list[Result]:
    """Runs every 0.5 s until CRITICAL: polled, with a ceiling a slow machine never meets (the proof takes a few
    seconds here); what the runs said on the way is the test's."""
    runs: list[Result] = []

    def critical() -> bool:
        time.sleep(0.5)
        runs.append(run_check("-u", sim.url, *FAST, *args))
        return runs[-1].code == CRITICAL

    wait_for("CRITICAL", critical, 120, interval=0, diag=lambda: "\n".join(r.first[:150] for r in runs))
    return runs


def assert_warned_then_stuck(runs: list[Result]) -> None:
    """OK while the steps made before the stop still show, then WARNING (stalling), then CRITICAL stuck."""
    codes = [r.code for r in runs]
    first = codes.index(WARNING)
    assert all(c == OK for c in codes[:first]) and all(c == WARNING for c in codes[first:-1]), codes
    assert runs[first].word == "stalling" and runs[-1].word == "stuck", [r.first for r in runs]
    assert all(r.first.startswith("LLAMACPP ") for r in runs), [r.first for r in runs]


def test_idle_ok_with_one_probe(make_sim, run_check):
    sim = make_sim()
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (OK, "idle") and r.first.startswith("LLAMACPP OK - idle: probe answered"), r.out
    assert [(q.method, q.path) for q in sim.inference_requests()] == [("POST", "/v1/completions")]


def test_busy_no_inference_request(make_sim, run_check):
    sim = make_sim("busy")
    time.sleep(0.3)
    first = run_check("-u", sim.url, *FAST)
    time.sleep(0.4)
    second = run_check("-u", sim.url, *FAST)
    for r in (first, second):
        assert (r.code, r.word) == (OK, "busy") and r.first.startswith("LLAMACPP OK - busy"), r.out
    assert float(second.perf["steps_per_second"]) > 0, second.out
    assert sim.inference_requests() == []


def test_stuck_in_a_decode_warning_then_critical(make_sim, run_check):
    sim = make_sim("busy")
    time.sleep(0.3)
    assert run_check("-u", sim.url, *FAST, *STUCK).word == "busy"
    sim.set_scenario("stuck")
    runs = until_critical(sim, run_check, *STUCK)
    assert_warned_then_stuck(runs)
    assert "2 running" in runs[-1].status, runs[-1].out


def test_metrics_off_is_no_metrics_naming_the_flag_on_every_run(make_sim, run_check):
    sim = make_sim(metrics=False)
    for _ in range(2):
        r = run_check("-u", sim.url, *FAST)
        assert r.code == WARNING and r.first.startswith(
            "LLAMACPP WARNING - no metrics: /metrics answered HTTP 501 (llama.cpp serves it only with --metrics)"), r.out
    assert posts(sim) == []


def test_asleep_is_idle_and_never_woken(make_sim, run_check):
    sim = make_sim(sleep_idle_seconds=0.5)
    time.sleep(0.7)
    for _ in range(2):
        r = run_check("-u", sim.url, *FAST)
        assert (r.code, r.word) == (OK, "idle") and r.first.startswith("LLAMACPP OK - idle: asleep"), r.out
        time.sleep(0.4)
    assert posts(sim) == [] and ("GET", "/slots") not in [(q.method, q.path) for q in sim.requests()]
    assert httpx.get(f"{sim.url}/props", timeout=5).json()["is_sleeping"] is True  # still asleep


def test_counters_past_a_million_without_slots_are_busy_progress_cannot_be_told(make_sim, run_check):
    sim = make_sim("busy", initial_decodes=BIG, slots=False)
    time.sleep(0.3)
    runs = []
    for scenario in ("busy", "busy", "stuck", "stuck", "stuck"):
        sim.set_scenario(scenario)
        time.sleep(0.5)
        runs.append(run_check("-u", sim.url, *FAST, *STUCK))
    for r in runs:  # 1.2e+09 never moves visibly: a stall is never judged from it
        assert (r.code, r.word) == (OK, "busy") and r.first.startswith("LLAMACPP OK - busy"), r.out
        assert "progress cannot be told" in r.status and "1.2e+09" in r.status, r.out
    assert sim.inference_requests() == []


def test_counters_past_a_million_with_slots_busy_then_stuck_by_the_slots(make_sim, run_check):
    sim = make_sim("busy", initial_decodes=BIG)
    time.sleep(0.3)
    for _ in range(3):
        r = run_check("-u", sim.url, *FAST, *STUCK)
        assert (r.code, r.word) == (OK, "busy") and "progress cannot be told" not in r.status, r.out
        time.sleep(0.5)
    assert ("GET", "/slots") in [(q.method, q.path) for q in sim.requests()]
    sim.set_scenario("stuck")
    assert_warned_then_stuck(until_critical(sim, run_check, *STUCK))
    assert sim.inference_requests() == []


def test_restart_told_by_the_start_header_alone_then_dead_is_down(make_sim, run_check):
    sim = make_sim(initial_decodes=BIG)  # a new process prints the same counters: only the header changed
    assert run_check("-u", sim.url, *FAST).word == "idle"
    time.sleep(0.4)
    sim.restart()
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (OK, "restarted") and r.first.startswith("LLAMACPP OK - restarted"), r.out
    sim.set_scenario("dead")
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (CRITICAL, "down"), r.out


ROUTER = {"models": ("alpha", "beta", "gamma"), "unloaded": ("gamma",)}


def states(sim: Simulator) -> dict[str, str]:
    return {m["id"]: m["status"]["value"] for m in httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"]}


def test_router_idle_probes_a_loaded_model_and_never_loads_one(make_sim, run_check):
    sim = make_sim(**ROUTER)
    for _ in range(2):
        r = run_check("-u", sim.url, *FAST)
        assert (r.code, r.word) == (OK, "idle") and r.first.startswith("LLAMACPP OK - idle"), r.out
        time.sleep(0.4)
    assert states(sim) == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}


def test_router_one_model_stuck_is_critical_naming_it(make_sim, run_check):
    sim = make_sim("busy", **ROUTER)
    time.sleep(0.3)
    assert run_check("-u", sim.url, *FAST, *STUCK).word == "busy"
    sim.set_scenario("dp_one_frozen")  # alpha goes on, beta stops inside a decode
    runs = until_critical(sim, run_check, *STUCK)
    assert_warned_then_stuck(runs)
    assert "beta" in runs[-1].status and "alpha" in runs[-1].status, runs[-1].out
    assert sim.inference_requests() == [] and states(sim)["gamma"] == "unloaded"
