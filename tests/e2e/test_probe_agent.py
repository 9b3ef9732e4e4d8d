"""`check_vllm --probe KIND --agent HOST:PORT` (issue 36, the probes' cost): the exec probe asks a running
`check_vllm_agent --probe-listen` and answers with its line, judging nothing itself; an agent that is gone,
hangs or is not an agent never fails a probe: the run then judges the server itself, as without --agent, and
its line says why. The installed check and the real agent process against the simulator; loopback stand-ins
for the agents that do not answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.probes.ask import ASK_TIMEOUT
from tests.rig.ports import free_port
from tests.rig.scripts import FAST, Result, run_script
from vllm_simulator import Simulator

DECISION = ("--stuck-seconds", "2", "--stuck-readings", "2")


@pytest.fixture
def agent(sim: Simulator) -> Iterator[str]:
    """The real agent on the simulator, its HTTP probes on a free port: HOST:PORT."""
    sim.set_scenario("busy")
    probes = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "check_vllm.haproxy.cli", "-u", sim.url, "--listen",
                             f"127.0.0.1:{free_port()}", "--probe-listen", f"127.0.0.1:{probes}", "--interval",
                             "0.5", *DECISION], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        until(f"http://127.0.0.1:{probes}/livez", 200)
        yield f"127.0.0.1:{probes}"
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def until(url: str, status: int, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = httpx.get(url, timeout=5)
            if got.status_code == status:
                return got
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer {status} within {timeout:g} s")
        time.sleep(0.2)


def probe(kind: str, url: str, state: Path, *extra: str) -> Result:
    return run_script("check_vllm", "--probe", kind, "-u", url, "--state-dir", str(state), *DECISION, *FAST, *extra)


def test_the_agents_answer_is_the_probes_and_nothing_is_judged_here(sim: Simulator, agent: str, tmp_path: Path):
    for kind in ("startup", "readiness", "liveness"):
        r = probe(kind, sim.url, tmp_path, "--agent", agent)
        assert r.code == 0 and r.out.startswith(f"{kind} pass: busy: "), r.out
    assert not tmp_path.exists() or os.listdir(tmp_path) == [], "a probe the agent answered kept no state here"
    sim.set_scenario("stuck")
    until(f"http://{agent}/livez", 503)
    live = probe("liveness", sim.url, tmp_path, "--agent", agent)
    assert live.code == 1 and live.out.startswith("liveness fail: CRITICAL stuck: "), live.out


def test_no_agent_listening_is_judged_here_and_said(sim: Simulator, tmp_path: Path):
    sim.set_scenario("busy")
    gone = f"127.0.0.1:{free_port()}"
    r = probe("liveness", sim.url, tmp_path, "--agent", gone)
    assert r.code == 0, r.out
    assert r.out.startswith(f"liveness pass in spite of: agent {gone} gave no answer (Connection refused): "
                            "judged by this run; busy: "), r.out
    assert os.listdir(tmp_path), "the run judged here keeps its own memory"
    sim.set_scenario("stuck")  # and judged here, it still proves a stall from its own readings
    words = []
    for _ in range(8):
        time.sleep(0.5)
        words.append(probe("liveness", sim.url, tmp_path, "--agent", gone))
        if words[-1].code == 1:
            break
    assert words[-1].code == 1 and "CRITICAL stuck: " in words[-1].out, [w.out for w in words]


class Silent:
    """A listener that accepts and then says nothing (a hung agent), or says `reply` and closes."""

    def __init__(self, reply: bytes | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply, self.held = reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(4096)
            if self.reply is None:
                self.held.append(conn)
            else:
                conn.sendall(self.reply)
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("reply, said", [
    (None, "timed out"),
    (b"HTTP/1.0 404 Not Found\r\n\r\nnot found\n", "not an agent's answer (404)"),
    (b"HTTP/1.0 503 Service Unavailable\r\n\r\n<html>upstream gone</html>\n", "not an agent's answer (503)"),
    (b"SSH-2.0-OpenSSH_9.2\r\n", "not an agent's answer (no status line)"),
])
def test_something_else_on_the_agents_port_never_fails_a_probe(sim: Simulator, tmp_path: Path, reply, said):
    sim.set_scenario("busy")
    other = Silent(reply)
    try:
        started = time.monotonic()
        r = probe("liveness", sim.url, tmp_path, "--agent", other.address)
        took = time.monotonic() - started
    finally:
        other.close()
    assert r.code == 0 and r.out.startswith(f"liveness pass in spite of: agent {other.address} gave no answer "
                                            f"({said}): judged by this run; busy: "), r.out
    # the bound is the product's own figures x5: an agent is given ASK_TIMEOUT (check_vllm.probes.ask, 2 s) in all,
    # then the run judges here, reading again after FAST's --reread-delay (0.4 s): a hung agent held it no longer
    assert took < 5 * (ASK_TIMEOUT + 0.4), f"the probe took {took:.1f} s"
