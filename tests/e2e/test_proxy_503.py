"""Issue 38, case 1: a same-host reverse proxy's empty 503 is not vLLM's word. Caddy with no error route answers
every request with an empty 503 once its active health check marks the upstream down (it does when vLLM's event
loop stalls a few seconds under a long batch), /health included: read as vLLM's EngineDeadError, a busy,
healthy server was CRITICAL `down` at once and restarted. Only vLLM's own API server proves a dead engine: it
keeps serving /metrics when its engine died. A loopback proxy that forwards to the simulator as Caddy does,
and turns to Caddy's empty 503 for every path when told."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.rig.scripts import FAST
from vllm_simulator import Simulator


class CaddyLike(http.server.ThreadingHTTPServer):
    """Forwards every request to `upstream`; with `down` set, answers each with an empty 503 (no upstreams)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream, self.down, self.paths = upstream, False, []
        #: Forward this many more requests, then turn down (its health check fails between two of them).
        self.down_after: int | None = None
        super().__init__(("127.0.0.1", 0), _Forward)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    server: CaddyLike
    protocol_version = "HTTP/1.1"

    def _relay(self) -> None:
        self.server.paths.append(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else None
        if self.server.down_after is not None:
            self.server.down_after -= 1
            self.server.down = self.server.down_after < 0
        if self.server.down:
            self.send_response(503)
            self.send_header("Server", "Caddy")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        req = urllib.request.Request(self.server.upstream + self.path, data=body, method=self.command,
                                     headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "text/plain")
        except urllib.error.HTTPError as err:
            status, data, ctype = err.code, err.read(), err.headers.get("Content-Type", "text/plain")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _relay  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def caddy(sim: Simulator) -> Iterator[CaddyLike]:
    proxy = CaddyLike(sim.url)
    yield proxy
    proxy.shutdown()
    proxy.server_close()


def test_a_proxys_empty_503_on_every_path_is_unresponsive_not_a_dead_engine(sim, caddy, run_check):
    sim.set_scenario("busy")
    first = run_check("-u", caddy.url, *FAST)
    assert first.code == 0 and first.word == "busy", first.first
    caddy.down = True  # its health check timed out once: "no upstreams available"
    r = run_check("-u", caddy.url, *FAST)
    assert r.code == 1 and r.first.startswith("VLLM WARNING - unresponsive: /metrics answered HTTP 503"), r.first
    assert "engine died" not in r.first
    live = run_check("--probe", "liveness", "-u", caddy.url, *FAST)
    assert live.code == 0 and live.out.startswith("liveness pass in spite of: WARNING unresponsive: "), live.out


def test_an_empty_503_to_the_idle_probe_behind_a_proxy_proves_nothing(sim, caddy, run_check):
    """The reading answered, then the proxy marked the upstream down: the probe, /health and /metrics again all
    get its empty 503. Not the engine's word: the probe went unanswered, which needs its proof."""
    sim.set_scenario("idle")
    run_check("-u", caddy.url, *FAST)
    time.sleep(0.5)  # past --min-gap: the next run compares and, idle, probes
    caddy.down_after = 1  # the next /metrics read is forwarded; everything after it gets the empty 503
    r = run_check("-u", caddy.url, *FAST)
    assert r.code in (0, 1) and "engine died" not in r.first, (r.first, caddy.paths)
    assert "/v1/completions" in caddy.paths and "/health" in caddy.paths, (r.first, caddy.paths)
    assert caddy.paths[-1].startswith("/metrics"), caddy.paths  # it read /metrics again before deciding


def test_vllms_own_dead_engine_is_still_down_at_once_through_the_proxy(sim, caddy, run_check):
    """The API server lives on and serves /metrics; its completions 500 and its /health 503: vLLM's own words."""
    sim.set_scenario("engine_dead")
    r = run_check("-u", caddy.url, *FAST)
    assert r.code == 2 and r.first.startswith("VLLM CRITICAL - down: engine died ("), r.first
