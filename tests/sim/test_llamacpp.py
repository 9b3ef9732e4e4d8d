"""The simulator's llama.cpp flavour must answer as llama-server b11434 does, or a check tested against it proves
nothing about llama.cpp: its source (tools/server/: server-task.cpp to_metrics, server-context.cpp routes,
server-queue.cpp sleep) and the pages recorded from a real one (tests/fixtures/real/llamacpp/).

Loopback only; the sleep timer and the reload are shortened through LlamacppOptions.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from vllm_simulator import LlamacppOptions, Simulator, demo
from vllm_simulator.llamacpp_page import cpp_double

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "llamacpp"
METRICS_OFF = (b'{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with '
               b'`--metrics`","type":"not_supported_error"}}')


@pytest.fixture
def make_sim() -> Iterator[Callable[..., Simulator]]:
    started: list[Simulator] = []

    def factory(options: LlamacppOptions | None = None, **kwargs: object) -> Simulator:
        sim = Simulator(port=0, flavour="llamacpp", llamacpp=options, **kwargs).start()  # type: ignore[arg-type]
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


def values(text: str) -> dict[str, str]:
    """Sample name -> the value exactly as printed."""
    return dict(line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def sleeping(sim: Simulator) -> bool:
    return bool(httpx.get(f"{sim.url}/props", timeout=5).json()["is_sleeping"])


def complete(sim: Simulator, timeout: float = 5) -> httpx.Response:
    return httpx.post(f"{sim.url}/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=timeout)


# --- the page ----------------------------------------------------------------------------------------------------


def test_fresh_page_is_the_recorded_idle_page_byte_for_byte(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    response = httpx.get(f"{sim.url}/metrics", timeout=5)
    assert response.status_code == 200 and response.content == (REAL / "idle.txt").read_bytes()
    assert response.headers["content-type"] == "text/plain; version=0.0.4"
    assert response.headers["server"] == "llama.cpp"


def test_busy_page_has_the_real_families_help_and_types_in_order(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy")
    time.sleep(0.3)
    text = httpx.get(f"{sim.url}/metrics", timeout=5).text
    real = (REAL / "busy-1.txt").read_text()
    assert comments(text) == comments(real) and list(values(text)) == list(values(real))
    assert "_created" not in text and "{" not in text and "# EOF" not in text
    got = values(text)
    assert (got["llamacpp:requests_processing"], got["llamacpp:requests_deferred"]) == ("2", "3")
    assert int(got["llamacpp:n_decode_total"]) > 0 and got["llamacpp:tokens_predicted_total"] == "0"


def test_values_print_as_a_cpp_stream_does_six_significant_digits() -> None:
    assert [cpp_double(v) for v in (0, 6194, 2047, 1234567, 1e-06, 0.00513, 1.99968, 4065.04, 1.2e9)] == [
        "0", "6194", "2047", "1.23457e+06", "1e-06", "0.00513", "1.99968", "4065.04", "1.2e+09"]
    for page in REAL.glob("*.txt"):
        if page.read_text().startswith("# HELP llamacpp:"):
            for printed in values(page.read_text()).values():  # every real value prints back the same
                assert cpp_double(float(printed)) == printed, (page.name, printed)


def test_counters_past_a_million_print_rounded_and_stand_still_while_busy(
        make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(LlamacppOptions(initial_decodes=1_200_000_000), scenario="busy")
    first = httpx.get(f"{sim.url}/metrics", timeout=5).text
    slots = httpx.get(f"{sim.url}/slots", timeout=5).json()
    time.sleep(0.4)
    second = httpx.get(f"{sim.url}/metrics", timeout=5).text
    assert values(first)["llamacpp:n_decode_total"] == values(second)["llamacpp:n_decode_total"] == "1.2e+09"
    assert values(second)["llamacpp:requests_processing"] == "2"
    moved = httpx.get(f"{sim.url}/slots", timeout=5).json()  # the exact counts still move
    assert moved[0]["next_token"][0]["n_decoded"] > slots[0]["next_token"][0]["n_decoded"]


def test_a_completion_counts_as_the_recorded_one_did(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    assert complete(sim).json()["choices"][0]["finish_reason"] == "length"
    after = values(httpx.get(f"{sim.url}/metrics", timeout=5).text)
    assert after["llamacpp:n_decode_total"] == "1" and after["llamacpp:tokens_predicted_total"] == "1"
    assert after["llamacpp:tokens_predicted_seconds_total"] == "1e-06"
    assert float(after["llamacpp:prompt_tokens_seconds"]) > 0
    again = values(httpx.get(f"{sim.url}/metrics", timeout=5).text)
    assert again["llamacpp:prompt_tokens_seconds"] == "0"  # every read empties the bucket
    assert [(r.method, r.path) for r in sim.inference_requests()] == [("POST", "/v1/completions")]


def test_metrics_ignores_a_query_and_404s_with_a_slash(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    whole = httpx.get(f"{sim.url}/metrics", params={"name[]": "llamacpp:requests_processing"}, timeout=5)
    assert whole.status_code == 200 and whole.text.count("# TYPE") == 15
    slash = httpx.get(f"{sim.url}/metrics/", timeout=5)
    assert slash.status_code == 404 and slash.headers["connection"] == "close"
    assert slash.content == (REAL / "metrics-slash.txt").read_bytes().split(b"\n\n", 1)[1].strip()


# --- metrics off, health, stuck ----------------------------------------------------------------------------------


def test_metrics_off_is_501_naming_the_flag_while_the_rest_answers(make_sim: Callable[..., Simulator]) -> None:
    for sim in (make_sim(LlamacppOptions(metrics=False)), make_sim(scenario="no_metrics")):
        response = httpx.get(f"{sim.url}/metrics", timeout=5)
        assert (response.status_code, response.content) == (501, METRICS_OFF)
        assert httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"][0]["owned_by"] == "llamacpp"
        assert httpx.get(f"{sim.url}/health", timeout=5).json() == {"status": "ok"}
    assert httpx.get(f"{sim.url}/props", timeout=5).json()["endpoint_metrics"] is True  # the scenario's is a proxy's


def test_stuck_in_a_decode_answers_metrics_and_health_frozen_but_no_completion(
        make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy")
    time.sleep(0.2)
    sim.set_scenario("stuck")
    first = values(httpx.get(f"{sim.url}/metrics", timeout=5).text)
    time.sleep(0.3)
    second = values(httpx.get(f"{sim.url}/metrics", timeout=5).text)
    assert first["llamacpp:n_decode_total"] == second["llamacpp:n_decode_total"]
    assert second["llamacpp:requests_processing"] == "2"
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
    assert httpx.get(f"{sim.url}/slots", timeout=5).status_code == 200  # served by the yielding queue
    with pytest.raises(httpx.ReadTimeout):
        complete(sim, timeout=0.5)


def test_a_loop_stopped_between_tasks_holds_metrics_but_not_health(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="hung_idle")
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{sim.url}/metrics", timeout=0.5)
    sim.set_scenario("idle")
    assert httpx.get(f"{sim.url}/metrics", timeout=5).status_code == 200


# --- identity ----------------------------------------------------------------------------------------------------


def test_process_start_header_is_an_integer_that_changes_only_on_restart(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()

    def header() -> str:
        return httpx.get(f"{sim.url}/metrics", timeout=5).headers["Process-Start-Time-Unix"]

    first = header()
    assert first.isdigit() and header() == first
    complete(sim)
    sim.restart()
    restarted = header()
    assert restarted.isdigit() and restarted != first
    assert values(httpx.get(f"{sim.url}/metrics", timeout=5).text)["llamacpp:n_decode_total"] == "0"
    sim.set_scenario("dead")
    sim.set_scenario("idle")  # a process that came back is a new one
    assert header() not in (first, restarted)


# --- sleep -------------------------------------------------------------------------------------------------------


def test_sleeps_after_the_idle_seconds_whatever_metrics_props_health_and_models_ask(
        make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(LlamacppOptions(sleep_idle_seconds=1.2))
    started = time.monotonic()
    while time.monotonic() - started < 0.6:  # none of these is a task that resets the timer
        for path in ("/metrics", "/props", "/health", "/v1/models"):
            assert httpx.get(f"{sim.url}{path}", timeout=5).status_code == 200
        assert not sleeping(sim)
        time.sleep(0.1)
    time.sleep(max(0.0, 1.3 - (time.monotonic() - started)))
    assert sleeping(sim)
    page = httpx.get(f"{sim.url}/metrics", timeout=5)  # answered from the cache, no wake
    assert page.status_code == 200 and sleeping(sim)
    assert sim.inference_requests() == []


def test_a_completion_wakes_it_after_the_reload_and_restarts_the_timer(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(LlamacppOptions(sleep_idle_seconds=1.0, reload_seconds=0.3))
    time.sleep(1.1)
    assert sleeping(sim)
    began = time.monotonic()
    assert complete(sim).status_code == 200
    assert time.monotonic() - began >= 0.3  # the model was reloaded first
    assert not sleeping(sim)
    time.sleep(0.4)
    assert not sleeping(sim)  # 0.4 s after the completion: the timer started again at it
    time.sleep(0.8)
    assert sleeping(sim)


def test_slots_is_a_task_that_wakes_it_too(make_sim: Callable[..., Simulator]) -> None:
    # 2 s idle: on eight workers over two cores, the /props read right after /slots may come a second later
    sim = make_sim(LlamacppOptions(sleep_idle_seconds=2.0, reload_seconds=0.1))
    time.sleep(2.1)
    assert sleeping(sim)
    slots = httpx.get(f"{sim.url}/slots", timeout=5).json()
    assert [slot["is_processing"] for slot in slots] == [False, False] and not sleeping(sim)
    assert sim.inference_requests() == []


def test_work_keeps_it_awake_and_idle_time_counts_from_the_end_of_the_work(
        make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(LlamacppOptions(sleep_idle_seconds=1.0), scenario="busy")
    time.sleep(1.2)
    assert not sleeping(sim)
    sim.set_scenario("idle")
    time.sleep(0.3)
    assert not sleeping(sim)
    time.sleep(0.9)
    assert sleeping(sim)


def test_no_slots_is_501_naming_the_flag_after_waking_it(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(LlamacppOptions(slots=False, sleep_idle_seconds=0.4, reload_seconds=0.1))
    time.sleep(0.5)
    assert sleeping(sim)
    response = httpx.get(f"{sim.url}/slots", timeout=5)  # create_response() waits for the wake, then refuses
    assert response.status_code == 501 and "Start it with `--slots`" in response.json()["error"]["message"]
    assert not sleeping(sim) and httpx.get(f"{sim.url}/props", timeout=5).json()["endpoint_slots"] is False


# --- what the flavour refuses, the CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{"engines": 2}, {"scenario": "dp_one_frozen"}, {"scenario": "sleeping"},
                                    {"scenario": "paused"}, {"legacy": True}])
def test_refuses_what_llama_server_has_no_counterpart_for(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Simulator(flavour="llamacpp", **kwargs)  # type: ignore[arg-type]
    sim = Simulator(flavour="llamacpp")
    if "scenario" in kwargs:
        with pytest.raises(ValueError, match="llamacpp"):
            sim.set_scenario(str(kwargs["scenario"]))
        assert sim.scenario == "idle"


def test_cli_serves_the_flavour_without_metrics() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "vllm_simulator", "--port", "0", "--flavour", "llamacpp",
                             "--no-metrics"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[3]
        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 501
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_demo_tours_each_engine_in_scenarios_its_flavour_takes() -> None:
    names = [step.name for step in demo.LLAMACPP_STEPS]
    assert len(set(names)) == len(names) and {"idle", "busy", "stuck", "metrics off", "asleep"} <= set(names)
    assert {steps[0].flavour for _, steps in demo.TOURS} == {"llamacpp", "sglang"}
    for _, steps in demo.TOURS:
        for step in steps:
            Simulator(flavour=step.flavour, scenario=step.scenario, llamacpp=step.options)  # not refused
            assert step.runs >= 1
