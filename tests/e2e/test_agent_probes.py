"""The long-running alternative to an exec probe (issue 28): `check_vllm_agent --probe-listen` answers a kubelet's
httpGet probes (GET /livez, /readyz, /startupz: 200 pass, 503 fail, the exec probe's line as the body) from the
verdicts it judges at its own cadence. The real agent process against the simulator; exact status and body."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.rig.loading_vllm import free_port
from vllm_simulator import Simulator


@pytest.fixture
def agent(sim: Simulator) -> Iterator[str]:
    sim.set_scenario("busy")  # never idle under the agent here: its idle probe is not what is counted
    port, probes = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "check_vllm.haproxy.cli", "-u", sim.url, "--listen",
                             f"127.0.0.1:{port}", "--probe-listen", f"127.0.0.1:{probes}", "--interval", "0.5",
                             "--stuck-seconds", "2", "--stuck-readings", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    url = f"http://127.0.0.1:{probes}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/livez", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def until(url: str, path: str, status: int, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        got = httpx.get(f"{url}{path}", timeout=5)
        if got.status_code == status or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def test_the_agent_answers_httpget_probes_from_its_own_verdicts(sim: Simulator, agent: str):
    for path, kind in (("/startupz", "startup"), ("/readyz", "readiness"), ("/livez", "liveness")):
        got = until(agent, path, 200)
        assert got.status_code == 200 and got.text.startswith(f"{kind} pass: busy: "), (path, got.text)
    sim.set_scenario("paused")  # quiet on purpose: out of rotation, never restarted
    ready = until(agent, "/readyz", 503)
    assert ready.status_code == 503 and ready.text.startswith("readiness fail: "), ready.text
    assert until(agent, "/livez", 200).status_code == 200
    sim.set_scenario("stuck")
    live = until(agent, "/livez", 503)
    assert live.status_code == 503 and live.text.startswith("liveness fail: CRITICAL stuck: "), live.text
    assert httpx.get(f"{agent}/metrics", timeout=5).status_code == 404
    assert sim.inference_requests() == []  # every probe reads the agent's latest judgement, never the server
