"""The scenario table is the simulator's single source of truth: every row must be reachable and do what it says.

Each test reads the row's fields and checks the wire against them, so a new row is covered without a new test.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.rig.waiting import wait_for
from vllm_simulator import BY_NAME, SCENARIOS, TABLE, EngineMode, MetricsAnswer, Scenario, Simulator, demo, main

#: (running, waiting) each mode shows on an engine with 2 slots and no real requests.
SHOWN: dict[EngineMode, tuple[float, float]] = {
    EngineMode.IDLE: (0.0, 0.0),
    EngineMode.BUSY: (2.0, 3.0),
    EngineMode.PREFILL: (1.0, 0.0),
    EngineMode.STUCK: (2.0, 2.0),
    EngineMode.HUNG: (0.0, 0.0),
    EngineMode.SLEEPING: (0.0, 0.0),
    EngineMode.DEFERRED: (0.0, 2.0),
    EngineMode.DEFERRED_HUNG: (0.0, 2.0),
}
#: The status ``GET /metrics`` answers for each kind of answer.
STATUS: dict[MetricsAnswer, int] = {
    MetricsAnswer.PAGE: 200,
    MetricsAnswer.SLOW: 200,
    MetricsAnswer.NOT_FOUND: 404,
    MetricsAnswer.HTML_200: 200,
    MetricsAnswer.HTTP_500: 500,
    MetricsAnswer.HTTP_502: 502,
}
ENGINES = 3  # more than any row spells out, so the "past the end" rule is exercised too


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator(port=0, engines=ENGINES, slow_seconds=0.2).start()
    try:
        yield s
    finally:
        s.stop()


def switch(sim: Simulator, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{sim.url}/_sim/scenario", json=body, timeout=5)


def gauges(text: str) -> dict[tuple[str, str], float]:
    """(metric, engine) -> value of the running/waiting gauges and the awake sleep state."""
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("vllm:num_requests_running", "vllm:num_requests_waiting") or (
                sample.name == "vllm:engine_sleep_state" and sample.labels.get("sleep_state") == "awake"
            ):
                found[(sample.name, sample.labels["engine"])] = sample.value
    return found


def test_every_row_has_its_own_name() -> None:
    """A second row of the same name would shadow the first in BY_NAME (SCENARIOS is built from TABLE, so
    comparing the two would be true by construction)."""
    assert len(set(SCENARIOS)) == len(TABLE)
    assert all(BY_NAME[entry.name] is entry for entry in TABLE)


@pytest.mark.parametrize("entry", TABLE, ids=SCENARIOS)
def test_every_row_is_complete(entry: Scenario) -> None:
    assert entry.description and "\n" not in entry.description and len(entry.description) <= 100
    assert [entry.mode(i) for i in range(len(entry.modes))] == list(entry.modes)
    assert entry.mode(len(entry.modes)) is entry.modes[0]


def test_a_row_without_modes_is_refused() -> None:
    with pytest.raises(ValueError):
        Scenario("nothing", "no engine at all", modes=())


@pytest.mark.parametrize("entry", [e for e in TABLE if e.listening], ids=[e.name for e in TABLE if e.listening])
def test_every_listening_row_round_trips_over_http_and_shows_its_fields(sim: Simulator, entry: Scenario) -> None:
    answer = switch(sim, {"scenario": entry.name})
    assert (answer.status_code, answer.json()) == (200, {"scenario": entry.name})
    assert httpx.get(f"{sim.url}/_sim/scenario", timeout=5).json() == {"scenario": entry.name}
    assert sim.scenario == entry.name
    assert sim.engines == max(ENGINES, entry.min_engines)
    if entry.metrics is MetricsAnswer.NOT_HTTP:  # no HTTP answer at all: the connection is reset
        with pytest.raises(httpx.ReadError):
            httpx.get(f"{sim.url}/metrics", timeout=5)
        return
    response = httpx.get(f"{sim.url}/metrics", timeout=5)
    assert response.status_code == STATUS[entry.metrics]
    if entry.metrics not in (MetricsAnswer.PAGE, MetricsAnswer.SLOW):
        assert "vllm:" not in response.text
        return
    shown = gauges(response.text)
    for engine in range(sim.engines):
        mode = entry.mode(engine)
        running, waiting = SHOWN[mode]
        assert shown[("vllm:num_requests_running", str(engine))] == running, (engine, mode)
        assert shown[("vllm:num_requests_waiting", str(engine))] == waiting, (engine, mode)
        assert shown[("vllm:engine_sleep_state", str(engine))] == (0.0 if mode is EngineMode.SLEEPING else 1.0)
    has_process = "process_start_time_seconds" in response.text
    assert has_process is not entry.multiprocess


@pytest.mark.parametrize("entry", TABLE, ids=SCENARIOS)
def test_entering_a_row_restarts_the_process_only_if_it_says_so(entry: Scenario) -> None:
    with Simulator(port=0, scenario="busy") as sim:
        started = sim.process_start_time
        sim.set_scenario(entry.name)
        assert (sim.process_start_time > started) is entry.restarts
        if not entry.listening:
            sim.set_scenario("idle")  # coming back is always a new process
            assert sim.process_start_time > started


@pytest.mark.parametrize("entry", [e for e in TABLE if not e.listening], ids=[e.name for e in TABLE if not e.listening])
def test_every_silent_row_closes_the_port_and_its_timer_reopens_it(sim: Simulator, entry: Scenario) -> None:
    started = sim.process_start_time
    assert switch(sim, {"scenario": entry.name, "seconds": 0.3}).json() == {"scenario": entry.name}
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.url}/health", timeout=2)
    wait_for("the timer to reopen the port", lambda: sim.scenario != entry.name, 60, interval=0.05)
    assert httpx.get(f"{sim.url}/_sim/scenario", timeout=5).json() == {"scenario": "idle"}
    assert sim.process_start_time > started


def test_unknown_rows_are_refused_everywhere(sim: Simulator) -> None:
    bad = switch(sim, {"scenario": "on_fire"})
    assert bad.status_code == 400
    assert bad.json()["scenarios"] == list(SCENARIOS)
    assert switch(sim, {"scenario": "idle", "then": "on_fire"}).status_code == 400
    with pytest.raises(ValueError, match="known: idle, busy"):
        sim.set_scenario("on_fire")


def test_legacy_pages_refuse_rows_that_need_several_engines() -> None:
    multi = [entry for entry in TABLE if entry.min_engines > 1]
    assert multi, "the table should have a data-parallel row"
    with Simulator(port=0, legacy=True) as sim:
        for entry in multi:
            assert switch(sim, {"scenario": entry.name}).status_code == 400
            with pytest.raises(ValueError):
                Simulator(legacy=True, scenario=entry.name)
        assert sim.scenario == "idle"


def test_cli_help_lists_every_row_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for entry in TABLE:
        assert entry.name in out and entry.description in out


def test_demo_tours_known_rows_once_each() -> None:
    names = [step.scenario for step in demo.STEPS]
    assert len(set(names)) == len(names)
    assert set(names) <= set(SCENARIOS)
    assert all(step.runs >= 1 for step in demo.STEPS)
