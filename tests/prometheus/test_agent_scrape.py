"""A real Prometheus (Debian's 2.42, from the package that brings promtool) scrapes the installed check_vllm_agent's
--metrics-listen beside the simulator, with the shipped contrib/prometheus/check-vllm-agent-rules.yml loaded: the
page is ingested as it is served, and a frozen engine fires CheckVLLMProvenFault with its word. On 127.0.0.1 only,
scraped and evaluated every second."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from check_vllm.contract import vocab
from tests.rig.ports import free_port
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

from .conftest import REPO
from .server import agent, answered, logs, prometheus, query

pytestmark = pytest.mark.prometheus

RULES = REPO / "contrib" / "prometheus" / "check-vllm-agent-rules.yml"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator(scenario="busy").start()
    try:
        yield s
    finally:
        s.stop()


def test_prometheus_scrapes_the_agent_and_the_shipped_rules_fire_on_proof(promtool, sim, tmp_path):
    metrics = free_port()
    config = ("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
              f"rule_files: ['{RULES}']\n"
              "scrape_configs:\n"
              f"  - job_name: check_vllm_agent\n    static_configs: [{{targets: ['127.0.0.1:{metrics}']}}]\n")
    with agent(tmp_path, "agent", sim.url, metrics, "--stuck-seconds", "2", "--stuck-readings", "2"), \
            prometheus(tmp_path, config) as api:
        wait_for("Prometheus to hold the agent's busy verdict",
                 lambda: answered(api, 'check_vllm_verdict{word="busy"} == 1'), 60, 0.5, lambda: logs(tmp_path))
        up = query(api, 'up{job="check_vllm_agent"}')
        assert [r["value"][1] for r in up] == ["1"], up
        (busy,) = query(api, 'check_vllm_verdict{word="busy"}')
        assert busy["metric"]["server"] == sim.url and busy["metric"]["engine"] == "vllm", busy
        words = query(api, "count(check_vllm_verdict)")[0]["value"][1]
        assert words == str(len(vocab.WORDS)), words  # one series per word of the contract
        sim.set_scenario("stuck")
        firing = wait_for("CheckVLLMProvenFault firing", lambda: answered(
            api, 'ALERTS{alertname="CheckVLLMProvenFault",alertstate="firing"}'), 60, 0.5, lambda: logs(tmp_path))
        assert firing[0]["metric"]["word"] == "stuck" and firing[0]["metric"]["severity"] == "critical", firing
        assert sim.inference_requests() == []

