"""The long-running alternative to an exec probe (issue 28): `check_vllm_agent --probe-listen` answers a kubelet's
httpGet probes (GET /livez, /readyz, /startupz: 200 pass, 503 fail, the exec probe's line as the body) from the
verdicts it judges at its own cadence. The real agent process against the simulator; exact status and body."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.rig.loading_vllm import free_port
from vllm_simulator import Simulator


@contextlib.contextmanager
def running_agent(server: str, *extra: str) -> Iterator[str]:
    """The real agent process judging `server` every 0.5 s with --probe-listen: its probes' base URL once it answers;
    stopped cleanly, without a traceback, at the end."""
    port, probes = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "check_vllm.haproxy.cli", "-u", server, "--listen",
                             f"127.0.0.1:{port}", "--probe-listen", f"127.0.0.1:{probes}", "--interval", "0.5",
                             "--stuck-seconds", "2", "--stuck-readings", "2", *extra],
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
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:  # seen once under -n 8: what each of its threads was doing, then kill it
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            try:
                stacks = subprocess.run([spy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True,
                                        timeout=30)
                threads = stacks.stdout + stacks.stderr
            except (OSError, subprocess.TimeoutExpired) as err:
                threads = f"(py-spy: {err})"
            proc.kill()
            raise AssertionError(f"the agent outlived SIGTERM by 10 s; its threads:\n{threads}"
                                 f"\nits stderr: {proc.communicate(timeout=10)[1]}") from None
        assert code == 0
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


@pytest.fixture
def agent(sim: Simulator) -> Iterator[str]:
    sim.set_scenario("busy")  # never idle under the agent here: its idle probe is not what is counted
    with running_agent(sim.url) as url:
        yield url


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
    assert httpx.get(f"{agent}/metrics", timeout=5).status_code == 200  # the verdicts for Prometheus (issue 55)
    assert sim.inference_requests() == []  # every probe reads the agent's latest judgement, never the server


def test_the_agent_judges_sglang_by_its_row():
    """The agent shares the check's reading and judge (issue 40): against the simulator's SGLang flavour, named
    with --engine, busy passes with no inference request, and a frozen engine fails liveness once the idle probe
    went unanswered with nothing moving; SGLang's /health, a real generation, is never asked."""
    from vllm_simulator.sglang_engine import SglangOptions

    sim = Simulator(port=0, flavour="sglang", sglang=SglangOptions(health_poll_seconds=0.05), scenario="busy").start()
    try:
        with running_agent(sim.url, "--engine", "sglang", "--probe-every", "1", "--probe-timeout", "0.5") as url:
            got = until(url, "/livez", 200)
            assert got.text.startswith("liveness pass: busy: "), got.text
            assert sim.inference_requests() == []
            sim.set_scenario("stuck")
            live = until(url, "/livez", 503, timeout=30)
            assert live.status_code == 503 and live.text.startswith("liveness fail: CRITICAL stuck: "), live.text
            assert "probe" in live.text, live.text
            assert not any(r.path in ("/health", "/health_generate") for r in sim.requests())
    finally:
        sim.stop()
