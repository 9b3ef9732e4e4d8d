"""Two vLLM backends behind a REAL HAProxy: check the balancer with --proxy, each backend directly.

Each test starts its own two simulators (in this process, so their request logs can be read) and one haproxy
process (tests/fleet/haproxy.py) with a leastconn frontend (health-checked with GET /health), a roundrobin
frontend and a stats page. The installed check_vllm script runs as a subprocess, as a scheduler runs it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.monitoring import wait_for
from vllm_simulator import Simulator

from .common import CRITICAL, OK, WARNING, Result, run_check
from .conftest import Timer
from .haproxy import HAProxy

pytestmark = pytest.mark.fleet

FAST = ("--min-gap", "0.5", "--reread-delay", "0.5")
GAP = 0.6  # between two runs: more than --min-gap, so every run compares


class Fleet:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sims: dict[str, Simulator] = {}
        self.lb: HAProxy | None = None

    def check(self, target: str, *args: str) -> Result:
        """Run check_vllm against a backend name ("a", "b") or a frontend ("lc", "rr"), each with its own state."""
        url = self.sims[target].url if target in self.sims else self.lb.url(target)
        return run_check(self.root / f"state-{target}", "--url", url, *args)

    def traffic(self, name: str) -> list[tuple[str, str]]:
        """What reached backend `name` since the last clear(), without HAProxy's own health checks."""
        return [(r.method, r.path) for r in self.sims[name].requests() if r.path != "/health"]

    def clear(self) -> None:
        for s in self.sims.values():
            s.clear_requests()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        f.sims = {"a": Simulator(scenario="busy").start(), "b": Simulator(scenario="busy").start()}
        f.lb = HAProxy(tmp_path, {n: s.url for n, s in f.sims.items()}).start()
        yield f
    finally:
        if f.lb:
            f.lb.stop()
        for s in f.sims.values():
            s.stop()


def test_the_balancer_with_proxy_reads_only_models_and_each_backend_is_checked_directly(fleet):
    fleet.clear()
    with Timer("balancer --proxy + direct"):
        proxied = [fleet.check("lc", "--proxy", *FAST) for _ in range(4)]
        for r in proxied:
            assert (r.code, r.word) == (OK, "proxy"), r
            assert r.first.startswith("VLLM OK - proxy: /v1/models lists tiny-llama"), r
        # --proxy reads /v1/models and nothing else, one GET per run; leastconn spread the runs over both
        a, b = fleet.traffic("a"), fleet.traffic("b")
        assert set(a + b) == {("GET", "/v1/models")}, (a, b)
        assert len(a + b) == 4 and a and b, (a, b)
        fleet.clear()
        for name in ("a", "b"):
            first = fleet.check(name, *FAST)  # no baseline yet: reads twice, --reread-delay apart
            time.sleep(GAP)
            second = fleet.check(name, *FAST)
            for r in (first, second):
                assert (r.code, r.word) == (OK, "busy"), (name, str(r))
            assert "2 running, 3 waiting" in second.status, second
            assert fleet.traffic(name) == [("GET", "/metrics/")] * 3, fleet.traffic(name)
            assert fleet.sims[name].inference_requests() == []


def test_a_frozen_backend_goes_stalling_then_stuck_while_the_balancer_stays_ok(fleet):
    with Timer("balancer: one backend frozen, then dead"):
        args = ("--stuck-seconds", "0", *FAST)
        for name in ("a", "b"):
            assert fleet.check(name, *args).word == "busy"
        fleet.sims["a"].set_scenario("stuck")  # engine frozen: /health, /v1/models and /metrics still answer
        seen: list[tuple[int, str]] = []
        for _ in range(5):
            time.sleep(GAP)
            r = fleet.check("a", *args)
            seen.append((r.code, r.word))
            if r.code == CRITICAL:
                break
        assert (CRITICAL, "stuck") in seen, seen
        assert (WARNING, "stalling") in seen[:seen.index((CRITICAL, "stuck"))], seen
        assert all(c in (OK, WARNING) for c, _ in seen[:-1]) and seen[-1] == (CRITICAL, "stuck"), seen
        r = fleet.check("b", *args)
        assert (r.code, r.word) == (OK, "busy"), r

        # HAProxy's health check cannot see the freeze: both servers stay UP and keep getting traffic,
        # and the balancer-level check (which must not read /metrics) stays OK.
        servers = fleet.lb.servers("vllm_leastconn")
        assert {n: s["status"] for n, s in servers.items()} == {"a": "UP", "b": "UP"}, servers
        fleet.clear()
        proxied = [fleet.check("lc", "--proxy", *FAST) for _ in range(4)]
        assert all((r.code, r.word) == (OK, "proxy") for r in proxied), [str(r) for r in proxied]
        assert fleet.traffic("a") and fleet.traffic("b"), "leastconn should spread the runs over both backends"

        # The frozen backend dies: HAProxy marks it DOWN and the other backend serves alone; the balancer
        # check stays OK because b answers, and a's own check says down.
        fleet.sims["a"].set_scenario("dead")
        wait_for("HAProxy to mark backend a DOWN", lambda: fleet.lb.servers("vllm_leastconn")["a"]["status"]
                 .startswith("DOWN"), 15, diag=lambda: str(fleet.lb.servers("vllm_leastconn")))
        fleet.clear()
        proxied = [fleet.check("lc", "--proxy", *FAST) for _ in range(4)]
        assert all((r.code, r.word) == (OK, "proxy") for r in proxied), [str(r) for r in proxied]
        assert fleet.traffic("b") == [("GET", "/v1/models")] * 4, fleet.traffic("b")
        r = fleet.check("a", *args)
        assert (r.code, r.word) == (CRITICAL, "down"), r


def test_the_balancer_checked_without_proxy_is_named_a_balancer(fleet):
    """/metrics through a roundrobin balancer alternates between two processes.

    Contract (the lead's change in the core, see docs/fleet.md): the check never takes the alternation for a
    restart after the first run, and from the third run on answers WARNING with the word `balancer` and tells
    the operator to use --proxy.
    """
    # Two real backends were started at different times and have served different amounts: give b its own
    # process (new start time, counters from 0) a second after a, as two simulators started together would
    # otherwise serve near-identical pages.
    time.sleep(1.0)
    fleet.sims["b"].restart()
    assert abs(fleet.sims["a"].process_start_time - fleet.sims["b"].process_start_time) >= 1.0
    fleet.clear()
    runs: list[Result] = []
    with Timer("balancer without --proxy"):
        for i in range(6):
            if i:
                time.sleep(GAP)
            runs.append(fleet.check("rr", *FAST))
    # the setup does what it claims: both backends served /metrics to the same check
    a, b = fleet.traffic("a"), fleet.traffic("b")
    assert ("GET", "/metrics/") in a and ("GET", "/metrics/") in b, (a, b)
    shown = "\n".join(f"run {i + 1}: {r}" for i, r in enumerate(runs))
    assert not any(r.first.startswith("VLLM OK - restarted") for r in runs[1:]), shown
    for r in runs[2:]:
        assert r.code == WARNING and r.word == "balancer", shown
        assert r.first.startswith("VLLM WARNING - balancer:") and "--proxy" in r.first, shown
