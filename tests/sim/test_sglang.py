"""The simulator's SGLang flavour must behave as SGLang 0.5.23's source says, or a check tested against it proves
nothing about SGLang. Each rule and the source it comes from: tests/fixtures/source/sglang-0.5.23/README.md.

Loopback only; the waits SGLang spends seconds on (health polling, the idle publish, the watchdog) are shortened
through SglangOptions.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from vllm_simulator import Simulator
from vllm_simulator.sglang_engine import SglangEngine, SglangOptions
from vllm_simulator.sglang_series import Page

MODEL = "tiny-llama"
SCHED = {"engine_type": "unified", "model_name": MODEL, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
TOKENIZER = {"engine_type": "unified", "is_streaming": "false", "model_name": MODEL}
FAST = SglangOptions(health_poll_seconds=0.05, health_check_timeout=0.4, idle_log_seconds=30.0)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_sim() -> Iterator[Callable[..., Simulator]]:
    started: list[Simulator] = []

    def factory(options: SglangOptions = FAST, **kwargs: object) -> Simulator:
        sim = Simulator(port=0, flavour="sglang", sglang=options, **kwargs).start()  # type: ignore[arg-type]
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


def page(sim: Simulator, query: str = "") -> tuple[str, Samples]:
    response = httpx.get(f"{sim.url}/metrics{query}", timeout=5)
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return response.text, samples


def get(samples: Samples, name: str, labels: dict[str, str] = SCHED, **extra: str) -> float | None:
    return samples.get((name, frozenset({**labels, **extra}.items())))


def progress(samples: Samples) -> tuple[float | None, ...]:
    return (get(samples, "sglang:realtime_tokens_total", mode="decode"),
            get(samples, "sglang:cuda_graph_passes_total", mode="decode_cuda_graph"),
            get(samples, "sglang:cuda_graph_passes_total", mode="prefill_none"),
            get(samples, "sglang:num_requests_total", TOKENIZER))


def test_page_is_multiprocess_mode_with_sglang_labels(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    text, samples = page(sim)
    assert "_created" not in text and "process_start_time_seconds" not in text
    assert "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge" in text
    assert "# TYPE sglang:realtime_tokens_total counter" in text
    assert get(samples, "sglang:num_running_reqs") == 0.0  # the warmup's prefill wrote it
    pids = [dict(labels) for name, labels in samples if name == "sglang:num_retracted_reqs"]
    assert len(pids) == 1 and set(pids[0]) == {*SCHED, "pid"}  # multiprocess_mode 'all': the writer's pid
    assert not any("pid" in dict(labels) for name, labels in samples if name == "sglang:num_running_reqs")
    assert get(samples, "sglang:num_requests_total", TOKENIZER) == 1.0  # the warmup request
    assert get(samples, "sglang:max_total_num_tokens") == 65536.0


def test_data_parallel_engines_differ_by_dp_rank_only_on_scheduler_families(
        make_sim: Callable[..., Simulator]) -> None:
    _, samples = page(make_sim(engines=2))
    ranks = {dict(labels).get("dp_rank") for name, labels in samples if name == "sglang:num_running_reqs"}
    assert ranks == {"0", "1"}
    assert get(samples, "sglang:num_requests_total", TOKENIZER) == 2.0  # one warmup per DP rank, one series


def test_fresh_process_without_warmup_has_no_work_gauges_until_the_idle_publish(
        make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(SglangOptions(skip_server_warmup=True, idle_log_seconds=0.5))
    text, samples = page(sim)
    assert "sglang:num_running_reqs" not in text and "sglang:token_usage" not in text
    assert "sglang:realtime_tokens_total" not in text and "sglang:num_requests_total" not in text
    assert get(samples, "sglang:prefill_effective_tokens_total", mode="input") == 0.0  # pre-seeded
    time.sleep(0.7)  # _maybe_log_idle_metrics: 30 s (here 0.5 s) after the collector was made
    _, samples = page(sim)
    assert get(samples, "sglang:num_running_reqs") == 0.0


def test_gauges_are_written_after_a_prefill_and_every_40th_decode_step_only() -> None:
    engine = SglangEngine(options=SglangOptions(skip_server_warmup=True))
    engine.decode(39, 2, 3, 100)
    assert engine.gauges is None and engine.realtime == {"decode": 78}
    engine.decode(1, 2, 3, 100)
    assert engine.gauges is not None and (engine.gauges.running, engine.gauges.queue) == (2, 3)
    engine.decode(39, 5, 0, 100)
    assert engine.gauges.running == 2  # stale: steps 41..79 write nothing
    engine.prefill(10, 4, 1, 100)
    assert (engine.gauges.running, engine.gauges.queue) == (4, 1)


def test_busy_moves_progress_counters_and_stuck_freezes_them(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy")
    first = progress(page(sim)[1])
    time.sleep(1.2)
    _, samples = page(sim)
    busy = progress(samples)
    assert all(b is not None and a is not None and b > a for a, b in zip(first[:3], busy[:3], strict=True))
    sim.set_scenario("stuck")
    _, a = page(sim)
    time.sleep(0.4)
    _, b = page(sim)
    assert progress(a) == progress(b)
    assert get(a, "sglang:num_running_reqs") == get(b, "sglang:num_running_reqs") >= 1  # last written, kept
    requests = ("sglang:http_requests_total", frozenset({"endpoint": "/metrics", "method": "GET"}.items()))
    assert b[requests] > a[requests]  # the scrapes themselves still count: no sign of progress


def test_hung_scheduler_keeps_a_stale_running_gauge(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="busy")
    time.sleep(1.0)
    sim.set_scenario("hung_idle")  # frozen, no batch: nothing publishes the idle values
    _, a = page(sim)
    time.sleep(0.3)
    _, b = page(sim)
    assert (get(b, "sglang:num_running_reqs") or 0) >= 1 and progress(a) == progress(b)


def test_idle_corrects_running_at_once_and_the_rest_within_the_idle_period(
        make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(SglangOptions(idle_log_seconds=0.6), scenario="busy")
    time.sleep(1.0)
    sim.set_scenario("idle")
    _, samples = page(sim)
    assert get(samples, "sglang:num_running_reqs") == 0.0  # disagreed with the empty batch: published on idle
    fresh = make_sim(SglangOptions(idle_log_seconds=0.6))
    _, samples = page(fresh)
    assert (get(samples, "sglang:token_usage") or 0) > 0  # the warmup's prefill, stale on an idle server
    time.sleep(0.8)
    _, samples = page(fresh)
    assert get(samples, "sglang:token_usage") == 0.0


def test_restart_drops_counters_and_gauges(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(SglangOptions(skip_server_warmup=True), scenario="busy")
    time.sleep(1.1)
    assert get(page(sim)[1], "sglang:num_requests_total", TOKENIZER)
    sim.set_scenario("idle")
    sim.restart()
    text, samples = page(sim)
    assert "sglang:num_requests_total" not in text and "sglang:realtime_tokens_total" not in text
    assert "sglang:num_running_reqs" not in text and "sglang:cuda_graph_passes_total" not in text
    warmed = make_sim(scenario="busy")
    time.sleep(1.1)
    warmed.restart()
    assert get(page(warmed)[1], "sglang:generation_tokens_total", TOKENIZER) == 8.0  # only the new warmup


def test_health_is_a_generation(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    before = page(sim)[1]
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
    assert httpx.get(f"{sim.url}/health_generate", timeout=5).status_code == 200
    assert [(r.method, r.path) for r in sim.inference_requests()] == [("GET", "/health"), ("GET", "/health_generate")]
    after = page(sim)[1]
    prefill = get(after, "sglang:realtime_tokens_total", mode="prefill_compute")
    assert prefill == (get(before, "sglang:realtime_tokens_total", mode="prefill_compute") or 0) + 2
    assert get(after, "sglang:num_requests_total", TOKENIZER) == get(before, "sglang:num_requests_total", TOKENIZER)
    assert httpx.get(f"{sim.url}/metrics", timeout=5).status_code == 200 and len(sim.inference_requests()) == 2


def test_health_fails_on_a_stuck_engine_and_ready_follows(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim(scenario="stuck")
    assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 200
    started = time.monotonic()
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 503
    assert time.monotonic() - started >= 0.4  # waited out the health check timeout
    assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 503  # server_status UnHealthy
    sim.set_scenario("idle")
    assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 200
    assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 200


def test_pause_makes_ready_503_and_holds_generations(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    paused = httpx.post(f"{sim.url}/pause_generation", json={}, timeout=5)
    assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
    assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 503
    answers: list[int] = []
    worker = threading.Thread(target=lambda: answers.append(httpx.post(
        f"{sim.url}/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=10).status_code))
    worker.start()
    time.sleep(0.4)
    assert answers == []  # held on is_pause_cond
    assert httpx.post(f"{sim.url}/continue_generation", json={}, timeout=5).status_code == 200
    worker.join(5)
    assert answers == [200]
    assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 200


def test_watchdog_kills_a_server_stuck_with_a_batch_only(make_sim: Callable[..., Simulator]) -> None:
    # 2 s: the first request must come before the watchdog fires, on eight workers over two cores too
    hung = make_sim(SglangOptions(watchdog_timeout=2.0), scenario="hung_idle")
    sim = make_sim(SglangOptions(watchdog_timeout=2.0), scenario="stuck")
    assert httpx.get(f"{sim.url}/v1/models", timeout=5).status_code == 200
    time.sleep(3.0)
    assert sim.scenario == "dead"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{sim.url}/v1/models", timeout=2)
    assert hung.scenario == "hung_idle"  # no batch active: the watchdog stays quiet


def test_models_completions_and_the_mounted_metrics_app(make_sim: Callable[..., Simulator]) -> None:
    sim = make_sim()
    card = httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"][0]
    assert (card["id"], card["owned_by"]) == (MODEL, "sglang")
    done = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "a b c", "max_tokens": 3}, timeout=5).json()
    assert done["usage"]["completion_tokens"] == 3 and done["choices"][0]["finish_reason"] == "length"
    assert get(page(sim)[1], "sglang:generation_tokens_total", TOKENIZER) == 8.0 + 3.0
    text, samples = page(sim, "?name[]=sglang:num_requests_total")  # a restricted registry over a
    assert (text, samples) == ("", {})  # MultiProcessCollector holds no collector by name: empty
    zipped = httpx.get(f"{sim.url}/metrics/", headers={"Accept-Encoding": "gzip"}, timeout=5)
    assert zipped.headers.get("content-encoding") == "gzip" and b"sglang:num_requests_total" in zipped.content
    assert httpx.get(f"{sim.url}/nothing_here", timeout=5).status_code == 404


def test_layout_matches_prometheus_clients_own_multiprocess_merge(tmp_path: Path) -> None:
    """What sglang_series lays out equals what MultiProcessCollector reads from SGLang-like .db files."""
    labels = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0"}
    files = {name: MmapedDict(str(tmp_path / name)) for name in
             ("counter_41.db", "gauge_mostrecent_41.db", "gauge_all_41.db", "histogram_41.db")}
    keyed = [*labels, "mode"]
    files["counter_41.db"].write_value(mmap_key("sglang:realtime_tokens", "sglang:realtime_tokens_total", keyed,
                                                [*labels.values(), "decode"], "h"), 7.0, 0.0)
    files["gauge_mostrecent_41.db"].write_value(mmap_key("sglang:token_usage", "sglang:token_usage", list(labels),
                                                         list(labels.values()), "h"), 0.5, 1.0)
    files["gauge_all_41.db"].write_value(mmap_key("sglang:num_paused_reqs", "sglang:num_paused_reqs", list(labels),
                                                  list(labels.values()), "h"), 0.0, 0.0)
    for le, value in (("1.0", 2.0), ("+Inf", 0.0)):
        files["histogram_41.db"].write_value(mmap_key("sglang:x", "sglang:x_bucket", [*labels, "le"],
                                                      [*labels.values(), le], "h"), value, 0.0)
    files["histogram_41.db"].write_value(mmap_key("sglang:x", "sglang:x_sum", list(labels), list(labels.values()),
                                                  "h"), 1.0, 0.0)
    for mmapped in files.values():
        mmapped.close()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(tmp_path))
    ours = Page()
    ours.counter("sglang:realtime_tokens_total", "h", {**labels, "mode": "decode"}, 7)
    ours.gauge("sglang:token_usage", "h", labels, 0.5)
    ours.gauge("sglang:num_paused_reqs", "h", labels, 0, pid=41)
    ours.histogram("sglang:x", "h", labels, (1.0,), 2, 1.0)
    theirs = generate_latest(registry).decode()
    mine = generate_latest(_Fixed(ours)).decode()  # type: ignore[arg-type]
    assert sorted(theirs.splitlines()) == sorted(mine.splitlines())
    for family in ("sglang:x", "sglang:num_paused_reqs"):  # within a family, the same sample order too
        assert [ln for ln in theirs.splitlines() if ln.startswith(family)] == \
            [ln for ln in mine.splitlines() if ln.startswith(family)]


class _Fixed:
    def __init__(self, page: Page) -> None:
        self._page = page

    def collect(self) -> list[object]:
        return list(self._page.metrics())


def test_fixture_pages_are_what_the_flavour_renders_now() -> None:
    from tests.sim.sglang_fixtures import OUT, pages

    rendered = pages()
    assert rendered and all((OUT / name).read_bytes() == body for name, body in rendered.items())
    assert b"sglang:num_running_reqs" not in rendered["idle_fresh.txt"]
    assert b'sglang:num_running_reqs{engine_type="unified",model_name="tiny-llama",moe_ep_rank="0",pp_rank="0",' \
        b'tp_rank="0"} 1.0' in rendered["hung_after_work.txt"]


def test_cli_serves_the_sglang_flavour() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "vllm_simulator", "--flavour", "sglang", "--port", "0"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[3]
        assert "sglang:num_requests_total" in httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        proc.terminate()
        proc.wait(10)
