"""The plugin inside a REAL Netdata agent (Debian's netdata 1.37), started here on loopback.

    bash .ci/netdata-deps.sh && python -m pytest tests/netdata -m netdata -q

Nothing here skips: without a netdata binary, or when the agent does not start, every test FAILS with
the reason and the agent's log tail. One agent runs three jobs: `sim` (a simulator, busy, later frozen),
`dead` (a closed port) and `slow` (a simulator whose /metrics takes 10 s), so the charts of `sim` also
prove that a dead and a slow server do not delay the others.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.vocab import CRITICAL
from check_vllm.netdata.alarms import NAMES
from check_vllm.netdata.charts import state_value
from vllm_simulator import Simulator

from .agent import Agent, free_port

pytestmark = pytest.mark.netdata

CHARTS = ("state", "requests", "tokens", "steps", "kv_cache", "probe", "stalled")
#: Every template of the shipped health.d: the verdict alarms (check_vllm.netdata.alarms), and the queue's.
ALARMS = (*NAMES, "vllm_waiting_growth")
#: A verdict's dimension at CRITICAL on vllm.state (1 + the state; the other words are 0).
CRITICAL_VALUE = state_value(CRITICAL)


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Simulator]]:
    sim = Simulator(scenario="busy").start()
    slow = Simulator(scenario="slow", slow_seconds=10.0).start()
    yield {"sim": sim, "slow": slow}
    sim.stop()
    slow.stop()


@pytest.fixture(scope="module")
def agent(sims: dict[str, Simulator], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    conf = (
        "[DEFAULT]\nstuck_readings = 2\nstuck_seconds = 4\n"
        f"[sim]\nurl = {sims['sim'].url}\n"
        f"[dead]\nurl = http://127.0.0.1:{free_port()}\n"
        f"[slow]\nurl = {sims['slow'].url}\ntimeout = 1.5\n"
    )
    started = time.monotonic()
    agent = Agent(Path(tmp_path_factory.mktemp("netdata")), conf).start()
    print(f"netdata answered after {time.monotonic() - started:.2f} s")
    yield agent
    agent.stop()


def charts(agent: Agent) -> dict[str, dict]:
    return {k: v for k, v in agent.get("/api/v1/charts")["charts"].items() if k.startswith("vllm_")}


def test_every_chart_of_every_job_is_in_api_v1_charts(agent, sims):
    found = agent.wait_for("vllm charts", lambda: len(charts(agent)) >= 3 * len(CHARTS) and charts(agent), 15)
    for job in ("sim", "dead", "slow"):
        for chart in CHARTS:
            c = found[f"vllm_{job}.{chart}"]
            assert c["context"] == f"vllm.{chart}" and c["plugin"] == "vllm.plugin"
    labels = agent.get("/api/v1/chart?chart=vllm_sim.state")["chart_labels"]
    assert labels["url"] == sims["sim"].url and labels["job"] == "sim"
    assert agent.wait_for("model label", lambda: agent.get("/api/v1/chart?chart=vllm_sim.requests")
                          ["chart_labels"]["model"] == "tiny-llama", 10)


def points(agent: Agent, chart: str, seconds: int) -> tuple[list[str], list[list]]:
    doc = agent.get(f"/api/v1/data?chart={chart}&after=-{seconds}&format=json&options=nonzero")
    return doc["labels"], doc["data"]


def test_real_values_arrive_every_second_despite_a_dead_and_a_slow_job(agent):
    def steady():
        labels, rows = points(agent, "vllm_sim.requests", 6)
        full = [r for r in rows if None not in r[1:]]
        return (labels, full) if len(full) >= 5 else None

    labels, rows = agent.wait_for("6 s of requests values", steady, 20)
    assert labels == ["time", "running", "waiting"]
    assert all(r[1:] == [2, 3] for r in rows)  # the busy simulator: 2 running, 3 waiting
    _, tokens = points(agent, "vllm_sim.tokens", 5)
    assert tokens and all(r[2] and r[2] > 0 for r in tokens if r[2] is not None)  # generation tokens/s
    _, state = points(agent, "vllm_sim.state", 3)
    labels = agent.get("/api/v1/data?chart=vllm_sim.state&after=-3&format=json")["labels"]
    assert {labels[i]: v for i, v in enumerate(state[0]) if i and v} == {"busy": 1}  # OK: 1 + 0


def test_the_dead_and_the_slow_job_are_chart_values(agent):
    def last_word(job: str) -> str | None:
        doc = agent.get(f"/api/v1/data?chart=vllm_{job}.state&after=-2&format=json")
        row = next((r for r in doc["data"] if None not in r[1:]), None)
        return next((doc["labels"][i] for i, v in enumerate(row or []) if i and v), None)  # 1 + its state

    agent.wait_for("dead job shows down", lambda: last_word("dead") == "down", 10)
    agent.wait_for("slow job shows unresponsive", lambda: last_word("slow") == "unresponsive", 15)


def test_every_alarm_of_the_health_file_is_loaded(agent):
    def loaded():
        names = set(agent.get("/api/v1/alarms?all")["alarms"])
        return names if all(f"vllm_sim.{'requests' if a == 'vllm_waiting_growth' else 'state'}.{a}" in names
                            for a in ALARMS) else None

    agent.wait_for("all vllm alarms instantiated for job sim", loaded, 15)


def test_a_dead_server_raises_the_down_alarm(agent):
    agent.wait_for("vllm_down CRITICAL for the dead job", lambda: agent.get("/api/v1/alarms")["alarms"]
                   .get("vllm_dead.state.vllm_down", {}).get("status") == "CRITICAL", 40)


def test_a_slow_server_proven_unresponsive_raises_its_alarm_critical(agent):
    """Issue 52: the alarm follows the verdict's state. Its /metrics slower than the job's timeout, the slow job is
    unresponsive WARNING, then CRITICAL once it lasted as long as stuck needs (4 s here); keyed on the word alone,
    the alarm stayed WARNING."""
    alarm = agent.wait_for("vllm_unresponsive CRITICAL for the slow job", lambda: (
        a := agent.get("/api/v1/alarms")["alarms"].get("vllm_slow.state.vllm_unresponsive", {}))
        .get("status") == "CRITICAL" and a, 90)
    assert alarm["value"] == CRITICAL_VALUE, alarm


def test_a_frozen_engine_raises_the_stuck_alarm(agent, sims):
    alarms = agent.get("/api/v1/alarms")["alarms"]
    assert "vllm_sim.state.vllm_stuck" not in alarms  # busy so far: nothing raised
    sims["sim"].set_scenario("stuck")
    started = time.monotonic()
    alarm = agent.wait_for("vllm_stuck CRITICAL", lambda: agent.get("/api/v1/alarms")["alarms"]
                           .get("vllm_sim.state.vllm_stuck", {}).get("status") == "CRITICAL"
                           and agent.get("/api/v1/alarms")["alarms"]["vllm_sim.state.vllm_stuck"], 45)
    print(f"stuck alarm raised {time.monotonic() - started:.1f} s after the freeze")
    assert alarm["value"] == CRITICAL_VALUE and sims["sim"].inference_requests() == []
