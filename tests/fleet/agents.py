"""The agent tier's parts: check_vllm_agent processes beside two simulators, a real HAProxy configured from the
shipped contrib/haproxy/haproxy.cfg, and a steady client load through it.

HAProxy gets four frontends over the same two backends, so one freeze is seen by all four at once (same load,
same freeze): `lc` and `rr` (leastconn, roundrobin) with the agent-check of the shipped file, `lc_plain` and
`rr_plain` the same without it. Every backend names the server that answered in an X-Server header.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.rig import loading_vllm
from tests.rig.monitoring import REPO, free_port, tail

from .common import localise, script
from .haproxy import HAProxy

SHIPPED = REPO / "contrib" / "haproxy" / "haproxy.cfg"
#: The agent's cadence and HAProxy's agent-inter in the tests (the shipped file says 2 s).
INTERVAL = 1.0
#: Seconds without progress before stuck: short, so a freeze reaches proof within the test.
STUCK_SECONDS = 4.0
AGENT_ARGS = ("--interval", f"{INTERVAL:g}", "--timeout", "1", "--stuck-seconds", f"{STUCK_SECONDS:g}",
              "--probe-every", "1", "--probe-timeout", "2")
FRONTENDS = ("lc", "rr", "lc_plain", "rr_plain")


class Agent:
    """One check_vllm_agent, as an operator runs it beside its backend (the installed console script)."""

    def __init__(self, root: Path, name: str, url: str, *extra: str) -> None:
        self.name, self.url, self.port = name, url, free_port()
        self.log = root / f"agent-{name}.log"
        self.argv = [script("check_vllm_agent"), "--url", url, "--listen", f"127.0.0.1:{self.port}",
                     *AGENT_ARGS, *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Agent:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"),
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"agent {self.name} exited with {self.proc.returncode}:\n{tail(self.log)}", pytrace=False)
            try:
                if self.reply():
                    return self
            except OSError:
                time.sleep(0.1)
        pytest.fail(f"agent {self.name} did not answer within 15 s:\n{tail(self.log)}", pytrace=False)

    def reply(self) -> str:
        """What HAProxy reads: one connection, the line until the agent closes."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=3) as s:
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        return data.decode("ascii")

    def words(self) -> str:
        return self.reply().split("#", 1)[0].strip()

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
            return None


def _backend(block: str, name: str, balance: str, agent: bool) -> str:
    block = block.replace("backend vllm\n", f"backend {name}\n").replace("balance leastconn", f"balance {balance}")
    if not agent:
        block = re.sub(r" agent-check agent-port \d+ agent-inter \S+", "", block)
        block = re.sub(r" agent-port \d+", "", block)
    return block + "    http-response set-header X-Server %s\n"


def config(backends: dict[str, str], agents: dict[str, int], ports: dict[str, int]) -> str:
    """The shipped file on loopback (its server lines, ports and intervals swapped for the test's), its backend
    repeated for roundrobin and without the agent, and a stats page."""
    servers = "".join(f"    server {n} {u.split('//', 1)[1]} agent-port {agents[n]}\n" for n, u in backends.items())
    text = localise(SHIPPED.read_text(), {
        "    log /dev/log local0\n": "",
        "bind :8080": f"bind 127.0.0.1:{ports['lc']}",
        "default_backend vllm\n": "default_backend vllm_leastconn\n",
        "check inter 2s": "check inter 500ms",
        "agent-inter 2s": f"agent-inter {INTERVAL:g}s",
        "    server gpu-01 10.0.0.11:8000\n    server gpu-02 10.0.0.12:8000\n": servers,
    })
    head, sep, block = text.partition("backend vllm\n")
    assert sep, "the shipped file no longer has a 'backend vllm' section: update the agent test"
    block = sep + block
    out = head + _backend(block, "vllm_leastconn", "leastconn", True)
    for front, balance, agent in (("rr", "roundrobin", True), ("lc_plain", "leastconn", False),
                                  ("rr_plain", "roundrobin", False)):
        name = f"be_{front}"
        out += f"\nfrontend {front}\n    bind 127.0.0.1:{ports[front]}\n    default_backend {name}\n\n"
        out += _backend(block, name, balance, agent)
    return out + f"\nlisten stats\n    bind 127.0.0.1:{ports['stats']}\n    stats enable\n    stats uri /stats\n"


#: The backend section behind each frontend.
BACKEND = {"lc": "vllm_leastconn", "rr": "be_rr", "lc_plain": "be_lc_plain", "rr_plain": "be_rr_plain"}


class AgentHAProxy(HAProxy):
    """tests/fleet/haproxy.py's process, started on the config above."""

    def __init__(self, root: Path, backends: dict[str, str], agents: dict[str, int]) -> None:
        super().__init__(root, backends)
        self.ports = {k: free_port() for k in (*FRONTENDS, "stats")}
        self.cfg.write_text(config(backends, agents, self.ports))

    def status(self, frontend: str) -> dict[str, str]:
        return {n: s["status"] for n, s in self.servers(BACKEND[frontend]).items()}


@dataclass
class Sent:
    started: float
    ended: float
    ok: bool
    server: str
    why: str = ""


class Load:
    """Steady clients through one frontend: each thread sends a 1-token chat completion, waits `pause`, again.

    Chat completions, so that the agent's own probe (a POST /v1/completions) is told apart at the server."""

    def __init__(self, url: str, threads: int = 2, timeout: float = 2.0, pause: float = 0.1) -> None:
        self.url, self.timeout, self.pause = url, timeout, pause
        self.sent: list[Sent] = []
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def _run(self) -> None:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        with httpx.Client(timeout=self.timeout) as client:
            while not self.stop_event.is_set():
                t0 = time.time()
                try:
                    r = client.post(f"{self.url}/v1/chat/completions", json=body)
                    sent = Sent(t0, time.time(), r.status_code == 200, r.headers.get("x-server", ""),
                                "" if r.status_code == 200 else f"HTTP {r.status_code}")
                except httpx.HTTPError as err:
                    sent = Sent(t0, time.time(), False, "", err.__class__.__name__)
                self.sent.append(sent)
                self.stop_event.wait(self.pause)

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(self.timeout + 5)

    def between(self, start: float, end: float) -> list[Sent]:
        """Requests started in [start, end)."""
        return [s for s in list(self.sent) if start <= s.started < end]


def first_time(what: str, cond: Callable[[], bool], timeout: float, every: float = 0.1) -> tuple[float, float]:
    """Poll `cond` until true: (wall time of the last poll that was false, of the first that was true)."""
    before = time.time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.time()
        if cond():
            return before, now
        before = now
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}", pytrace=False)


class Loaders(loading_vllm.Loaders):
    """tests/rig/loading_vllm.py's loading server, with SO_REUSEADDR as vLLM's own create_server_socket sets it: the
    port it takes over from the old process still holds that process's closed connections (TIME_WAIT)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        plain = "s = socket.socket()\n"
        assert plain in loading_vllm.SCRIPT, "tests/rig/loading_vllm.py changed: update the agent tier's loader"
        self.script.write_text(loading_vllm.SCRIPT.replace(
            plain, plain + "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"))
