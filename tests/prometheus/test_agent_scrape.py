"""A real Prometheus (Debian's 2.42, from the package that brings promtool) scrapes the installed check_vllm_agent's
--metrics-listen beside the simulator, with the shipped contrib/prometheus/check-vllm-agent-rules.yml loaded: the
page is ingested as it is served, and a frozen engine fires CheckVLLMProvenFault with its word. On 127.0.0.1 only,
scraped and evaluated every second."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.contract import vocab
from tests.rig.ports import free_port
from tests.rig.scripts import script
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

from .conftest import REPO

pytestmark = pytest.mark.prometheus

RULES = REPO / "contrib" / "prometheus" / "check-vllm-agent-rules.yml"


@contextlib.contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def query(api: str, expr: str) -> list[dict]:
    got = httpx.get(f"{api}/api/v1/query", params={"query": expr}, timeout=5)
    assert got.status_code == 200, got.text
    return got.json()["data"]["result"]


@pytest.fixture
def sim() -> Iterator[Simulator]:
    s = Simulator(scenario="busy").start()
    try:
        yield s
    finally:
        s.stop()


def test_prometheus_scrapes_the_agent_and_the_shipped_rules_fire_on_proof(promtool, sim, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "Debian's prometheus package (.ci/prometheus-deps.sh) brings the server with promtool"
    metrics, web = free_port(), free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        f"  - job_name: check_vllm_agent\n    static_configs: [{{targets: ['127.0.0.1:{metrics}']}}]\n")
    agent = [script("check_vllm_agent"), "-u", sim.url, "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen",
             f"127.0.0.1:{metrics}", "--allow", "127.0.0.1", "--interval", "0.5", "--stuck-seconds", "2",
             "--stuck-readings", "2"]
    server = [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
              f"--web.listen-address=127.0.0.1:{web}"]
    api = f"http://127.0.0.1:{web}"
    with process(agent, tmp_path / "agent.log"), process(server, tmp_path / "prometheus.log"):
        logs = lambda: "\n".join(p.read_text()[-3000:] for p in tmp_path.glob("*.log"))  # noqa: E731
        wait_for("Prometheus to hold the agent's busy verdict",
                 lambda: _ready(api, 'check_vllm_verdict{word="busy"} == 1'), 60, 0.5, logs)
        up = query(api, 'up{job="check_vllm_agent"}')
        assert [r["value"][1] for r in up] == ["1"], up
        (busy,) = query(api, 'check_vllm_verdict{word="busy"}')
        assert busy["metric"]["server"] == sim.url and busy["metric"]["engine"] == "vllm", busy
        words = query(api, "count(check_vllm_verdict)")[0]["value"][1]
        assert words == str(len(vocab.WORDS)), words  # one series per word of the contract
        sim.set_scenario("stuck")
        firing = wait_for("CheckVLLMProvenFault firing", lambda: _ready(
            api, 'ALERTS{alertname="CheckVLLMProvenFault",alertstate="firing"}'), 60, 0.5, logs)
        assert firing[0]["metric"]["word"] == "stuck" and firing[0]["metric"]["severity"] == "critical", firing
        assert sim.inference_requests() == []


def _ready(api: str, expr: str) -> list[dict]:
    with contextlib.suppress(httpx.HTTPError):
        return query(api, expr)
    return []
