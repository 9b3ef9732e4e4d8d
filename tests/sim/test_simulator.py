"""The vLLM simulator must behave like vLLM on the wire, or the check's tests prove nothing.

Every test talks real HTTP (httpx) to a Simulator started on a free loopback port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.rig.waiting import wait_for
from vllm_simulator import (
    GENERATION_TOKENS_PER_SLOT_SECOND,
    PROMPT_TOKENS_PER_ENGINE_SECOND,
    SCENARIOS,
    STEPS_PER_SLOT_SECOND,
    Simulator,
)
from vllm_simulator.core import DEFAULT_BUSY_QUEUE_SECONDS

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
MODEL = "tiny-llama"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_sim() -> Iterator[Callable[..., Simulator]]:
    """Start simulators on free ports and always stop them."""
    started: list[Simulator] = []

    def factory(**kwargs: object) -> Simulator:
        sim = Simulator(port=0, **kwargs).start()  # type: ignore[arg-type]
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


def scrape(sim: Simulator) -> Samples:
    response = httpx.get(f"{sim.url}/metrics", timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def eng(engine: str = "0", **extra: str) -> dict[str, str]:
    return {"engine": engine, "model_name": MODEL, **extra}


PROGRESS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:iteration_tokens_total_sum",
)


def progress(samples: Samples, engine: str = "0") -> dict[str, float]:
    labels = eng(engine)
    signals = {name: value(samples, name, **labels) for name in PROGRESS}
    signals["finished"] = sum(
        value(samples, "vllm:request_success_total", **labels, finished_reason=reason)
        for reason in ("stop", "length", "abort")
    )
    signals["kv"] = value(samples, "vllm:kv_cache_usage_perc", **labels)
    return signals


def complete(sim: Simulator, timeout: float = 5.0, **body: object) -> httpx.Response:
    payload = {"model": MODEL, "prompt": "say hi to me", "max_tokens": 1, **body}
    return httpx.post(f"{sim.url}/v1/completions", json=payload, timeout=timeout)


# --- the page -------------------------------------------------------------------------------------------------


def test_current_page_has_vllm_names_labels_and_process_identity(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    samples = scrape(sim)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert value(samples, name, **eng()) == 0.0
    assert value(samples, "vllm:engine_sleep_state", **eng(sleep_state="awake")) == 1.0
    assert value(samples, "vllm:engine_sleep_state", **eng(sleep_state="weights_offloaded")) == 0.0
    assert value(samples, "vllm:engine_sleep_state", **eng(sleep_state="discard_all")) == 0.0
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
                 "vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum"):
        assert value(samples, name, **eng()) == 0.0
    for reason in ("stop", "length", "abort"):
        assert value(samples, "vllm:request_success_total", **eng(finished_reason=reason)) == 0.0
    les = {dict(labels)["le"] for name, labels in samples if name == "vllm:iteration_tokens_total_bucket"}
    assert les == {"1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0", "1024.0", "2048.0",
                   "4096.0", "8192.0", "+Inf"}
    assert value(samples, "process_start_time_seconds") == pytest.approx(sim.process_start_time)
    assert value(samples, "vllm:prompt_tokens_created", **eng()) == pytest.approx(sim.process_start_time)
    assert "vllm:gpu_cache_usage_perc" not in {name for name, _ in samples}
    # every vllm series carries model_name, and a real page is tens of KB
    assert all(dict(labels).get("model_name") == MODEL for name, labels in samples if name.startswith("vllm:"))
    assert len(httpx.get(f"{sim.url}/metrics").content) > 35_000


def test_legacy_page_uses_v0_names_without_engine_label(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(legacy=True, scenario="busy")
    samples = scrape(sim)
    names = {name for name, _ in samples}
    assert "vllm:gpu_cache_usage_perc" in names
    assert "vllm:kv_cache_usage_perc" not in names
    assert "vllm:engine_sleep_state" not in names
    assert value(samples, "vllm:num_requests_running", model_name=MODEL) == 2.0
    assert value(samples, "vllm:generation_tokens_total", model_name=MODEL) >= 0.0
    assert all("engine" not in dict(labels) for _, labels in samples)
    with pytest.raises(ValueError):
        Simulator(legacy=True, engines=2)


@pytest.mark.parametrize("kwargs", [{"multiprocess": True}, {"scenario": "multiprocess"}])
def test_multiprocess_has_no_process_metrics_and_no_created(
    make_sim: Callable[..., Simulator], kwargs: dict[str, object]
) -> None:
    sim = make_sim(**kwargs)
    samples = scrape(sim)
    names = {name for name, _ in samples}
    assert not [n for n in names if n.startswith("process_") or n.endswith("_created")]
    assert value(samples, "vllm:generation_tokens_total", **eng()) >= 0.0


# --- counters over time ---------------------------------------------------------------------------------------


def test_busy_counters_advance_at_the_documented_rates(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy", max_num_seqs=2)
    t0 = time.monotonic()  # before the first scrape: the counters' window lies inside [t0, end of the second]
    before = scrape(sim)
    time.sleep(0.2)
    after = scrape(sim)
    elapsed = time.monotonic() - t0
    assert value(after, "vllm:num_requests_running", **eng()) == 2.0
    assert value(after, "vllm:num_requests_waiting", **eng()) == 3.0
    delta = {k: progress(after)[k] - progress(before)[k] for k in progress(after)}
    assert all(v != 0 for v in delta.values()), delta
    generated = delta["vllm:generation_tokens_total"]
    assert 0.15 * 2 * GENERATION_TOKENS_PER_SLOT_SECOND <= generated <= elapsed * 2 * 50.0 + 5
    assert delta["vllm:iteration_tokens_total_count"] == pytest.approx(
        generated * STEPS_PER_SLOT_SECOND / GENERATION_TOKENS_PER_SLOT_SECOND)
    assert delta["vllm:prompt_tokens_total"] == pytest.approx(
        generated * PROMPT_TOKENS_PER_ENGINE_SECOND / (2 * GENERATION_TOKENS_PER_SLOT_SECOND))
    assert delta["vllm:iteration_tokens_total_sum"] == pytest.approx(
        delta["vllm:prompt_tokens_total"] + generated)
    assert 0.3 <= progress(after)["kv"] <= 0.9


@pytest.mark.parametrize("scenario", ["idle", "stuck"])
def test_idle_and_stuck_freeze_counters_and_gauges(make_sim: Callable[..., Simulator], scenario: str) -> None:
    sim = make_sim(scenario="busy")
    time.sleep(0.05)
    sim.set_scenario(scenario)
    before = scrape(sim)
    time.sleep(0.2)
    after = scrape(sim)
    assert progress(after) == progress(before)
    running = value(after, "vllm:num_requests_running", **eng())
    waiting = value(after, "vllm:num_requests_waiting", **eng())
    assert (running, waiting) == ((2.0, 2.0) if scenario == "stuck" else (0.0, 0.0))
    if scenario == "stuck":
        assert progress(after)["kv"] > 0.0


def test_long_prefill_moves_only_kv_usage(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="long_prefill")
    before = progress(scrape(sim))
    time.sleep(0.2)
    samples = scrape(sim)
    after = progress(samples)
    assert after["kv"] > before["kv"]
    assert after["kv"] <= 0.95
    assert {k: v for k, v in after.items() if k != "kv"} == {k: v for k, v in before.items() if k != "kv"}
    assert value(samples, "vllm:num_requests_running", **eng()) == 1.0
    assert value(samples, "vllm:num_requests_waiting", **eng()) == 0.0


def test_dp_one_frozen_has_engine_1_frozen_and_engine_0_moving(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(engines=1)
    sim.set_scenario("dp_one_frozen")
    assert sim.engines == 2
    before = scrape(sim)
    time.sleep(0.2)
    after = scrape(sim)
    assert progress(after, "1") == progress(before, "1")
    assert value(after, "vllm:num_requests_running", **eng("1")) == 2.0
    assert all(progress(after, "0")[k] > progress(before, "0")[k] for k in PROGRESS)


# --- the slot limit and completions ---------------------------------------------------------------------------


def test_idle_completion_answers_at_once_and_moves_counters(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    before = scrape(sim)
    started = time.monotonic()
    response = complete(sim, prompt="one two three four", max_tokens=3)
    # at once: not queued as a busy server queues a request (DEFAULT_BUSY_QUEUE_SECONDS, 30 s): a fifth of it
    assert time.monotonic() - started < DEFAULT_BUSY_QUEUE_SECONDS / 5
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    after = scrape(sim)
    delta = {k: progress(after)[k] - progress(before)[k] for k in progress(after)}
    assert delta == {
        "vllm:generation_tokens_total": 3.0,
        "vllm:prompt_tokens_total": 4.0,
        "vllm:iteration_tokens_total_count": 3.0,
        "vllm:iteration_tokens_total_sum": 7.0,
        "finished": 1.0,
        "kv": 0.0,
    }
    assert value(after, "vllm:request_success_total", **eng(finished_reason="length")) == 1.0

    chat = httpx.post(f"{sim.url}/v1/chat/completions", timeout=5, json={
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hello there"}]})
    assert chat.status_code == 200
    assert chat.json()["choices"][0]["message"]["role"] == "assistant"
    assert chat.json()["usage"]["total_tokens"] == 4


def test_busy_completion_queues_and_leaves_the_queue_on_timeout(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy")
    with pytest.raises(httpx.TimeoutException):
        complete(sim, timeout=0.5)
    time.sleep(0.15)  # the server notices the hang-up within a wait slice
    assert value(scrape(sim), "vllm:num_requests_waiting", **eng()) == 3.0
    assert value(scrape(sim), "vllm:request_success_total", **eng(finished_reason="length")) == 0.0


def test_busy_completion_is_served_after_busy_queue_seconds(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy", busy_queue_seconds=0.3)
    started = time.monotonic()
    response = complete(sim, timeout=5)
    assert response.status_code == 200
    assert time.monotonic() - started >= 0.3  # queued its busy_queue_seconds first; served (200) within its timeout


def test_stuck_completion_waits_until_the_scenario_changes(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="stuck")
    result: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: result.append(complete(sim, timeout=5)))
    worker.start()
    time.sleep(0.3)
    assert not result
    assert value(scrape(sim), "vllm:num_requests_waiting", **eng()) == 3.0  # 2 background + ours
    sim.set_scenario("idle")
    worker.join(timeout=5)
    assert result and result[0].status_code == 200


def test_sleeping_engine_reports_sleep_state_and_refuses_completions(
    make_sim: Callable[..., Simulator],
) -> None:
    sim = make_sim(scenario="sleeping")
    samples = scrape(sim)
    assert value(samples, "vllm:engine_sleep_state", **eng(sleep_state="awake")) == 0.0
    assert value(samples, "vllm:engine_sleep_state", **eng(sleep_state="weights_offloaded")) == 1.0
    response = complete(sim)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400


# --- process identity -----------------------------------------------------------------------------------------


def test_restart_resets_counters_and_changes_process_identity(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    assert complete(sim, max_tokens=4).status_code == 200
    before = scrape(sim)
    assert value(before, "vllm:generation_tokens_total", **eng()) == 4.0
    sim.restart()
    after = scrape(sim)
    assert value(after, "process_start_time_seconds") > value(before, "process_start_time_seconds")
    assert value(after, "vllm:generation_tokens_created", **eng()) > value(
        before, "vllm:generation_tokens_created", **eng())
    assert all(v == 0.0 for k, v in progress(after).items())

    start = value(after, "process_start_time_seconds")
    sim.set_scenario("restarted")
    assert value(scrape(sim), "process_start_time_seconds") > start
    assert sim.scenario == "restarted"


# --- broken /metrics and a dead server ------------------------------------------------------------------------


def test_broken_metrics_scenarios(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="no_metrics")
    response = httpx.get(f"{sim.url}/metrics")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}
    models = httpx.get(f"{sim.url}/v1/models").json()
    assert models["data"][0]["id"] == MODEL
    assert models["data"][0]["owned_by"] == "vllm"
    assert models["data"][0]["max_model_len"] == 2048
    assert complete(sim).status_code == 200

    sim.set_scenario("html")
    response = httpx.get(f"{sim.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.text.startswith("<html><body><h1>502 Bad Gateway</h1>")

    sim.set_scenario("http_500")
    response = httpx.get(f"{sim.url}/metrics")
    assert (response.status_code, response.text) == (500, "Internal Server Error")
    sim.set_scenario("http_502")
    assert httpx.get(f"{sim.url}/metrics").status_code == 502

    health = httpx.get(f"{sim.url}/health")
    assert (health.status_code, health.content) == (200, b"")
    missing = httpx.get(f"{sim.url}/nope")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})


def test_slow_metrics_answers_late_other_endpoints_do_not(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="slow", slow_seconds=0.6)
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{sim.url}/metrics", timeout=0.2)
    assert httpx.get(f"{sim.url}/v1/models", timeout=0.5).status_code == 200
    started = time.monotonic()
    assert httpx.get(f"{sim.url}/metrics", timeout=5).status_code == 200
    assert time.monotonic() - started >= 0.5


def test_dead_refuses_connections_and_comes_back_on_the_same_port_as_a_new_process(
    make_sim: Callable[..., Simulator],
) -> None:
    sim = make_sim()
    url = sim.url
    with httpx.Client(timeout=2) as client:
        first_start = value(scrape(sim), "process_start_time_seconds")
        assert client.get(f"{url}/health").status_code == 200  # leaves a keep-alive connection in the pool
        sim.set_scenario("dead")
        with pytest.raises(httpx.ConnectError):
            client.get(f"{url}/health")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/metrics", timeout=2)
    sim.set_scenario("idle")
    assert sim.url == url
    assert value(scrape(sim), "process_start_time_seconds") > first_start


# --- request log and HTTP control -----------------------------------------------------------------------------


def test_request_log_records_traffic_but_not_control_calls(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    httpx.get(f"{sim.url}/metrics")
    complete(sim)
    assert httpx.post(f"{sim.url}/_sim/scenario", json={"scenario": "stuck"}).json() == {"scenario": "stuck"}
    assert sim.scenario == "stuck"
    bad = httpx.post(f"{sim.url}/_sim/scenario", json={"scenario": "on_fire"})
    assert bad.status_code == 400
    assert httpx.post(f"{sim.url}/_sim/restart").status_code == 200
    log = httpx.get(f"{sim.url}/_sim/requests").json()
    assert [(r["method"], r["path"]) for r in log] == [("GET", "/metrics"), ("POST", "/v1/completions")]
    assert log == [{"method": r.method, "path": r.path, "at": r.at} for r in sim.requests()]
    assert [r.path for r in sim.inference_requests()] == ["/v1/completions"]
    assert httpx.post(f"{sim.url}/_sim/clear").status_code == 200
    assert sim.requests() == []
    sim.clear_requests()


def test_scenarios_tuple_is_complete() -> None:
    assert SCENARIOS == ("idle", "busy", "long_prefill", "stuck", "hung_idle", "restarted", "dp_one_frozen", "multiprocess",
                         "no_metrics", "html", "http_500", "http_502", "not_http", "sleeping", "slow", "dead", "paused",
                         "kv_deferred", "engine_dead", "paused_reject", "checkpoint_prepared", "checkpoint_failed",
                         "fault_held", "deferred_hung")
    with pytest.raises(ValueError):
        Simulator(scenario="on_fire")


# --- the CLI --------------------------------------------------------------------------------------------------


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_cli_prints_its_url_serves_and_exits_0_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_simulator", "--port", "0", "--scenario", "busy", "--engines", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        prefix = "vllm-simulator listening on "
        assert line.startswith(prefix) and line.endswith(" scenario=busy"), line
        url = line[len(prefix):].split()[0]
        text = httpx.get(f"{url}/metrics", timeout=5).text
        assert 'vllm:num_requests_running{engine="1",model_name="tiny-llama"} 2.0' in text
        # a dead subprocess cannot be reached, so it is told when to come back
        # (dead for 2 s: a loaded machine must still meet the refusal inside it; then back, waited for)
        answer = httpx.post(f"{url}/_sim/scenario", json={"scenario": "dead", "seconds": 2}, timeout=5)
        assert answer.json() == {"scenario": "dead"}
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=2)
        wait_for("the subprocess back", lambda: _answers(f"{url}/_sim/scenario"), 60, interval=0.1)
        assert httpx.get(f"{url}/_sim/scenario", timeout=5).json() == {"scenario": "idle"}
        assert json.loads(httpx.get(f"{url}/_sim/requests", timeout=5).text)[0]["path"] == "/metrics"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_hung_idle_shows_no_work_and_never_answers(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy")
    time.sleep(0.05)
    sim.set_scenario("hung_idle")
    before = scrape(sim)
    assert (value(before, "vllm:num_requests_running", **eng()), value(before, "vllm:num_requests_waiting", **eng())) \
        == (0.0, 0.0)
    with pytest.raises(httpx.TimeoutException):
        complete(sim, timeout=0.5)
    time.sleep(0.15)
    assert progress(scrape(sim)) == progress(before)
