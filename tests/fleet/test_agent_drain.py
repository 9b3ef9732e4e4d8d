"""Drain early, restart late (issue 20): check_vllm_agent beside each of two backends, a REAL HAProxy (2.6, built
from contrib/haproxy/haproxy.cfg) in front, a steady client load through it.

One freeze is seen at once by four frontends over the same two backends: leastconn and roundrobin with the
agent-check, the same two without it; so "with" and "without" are the same load and the same freeze. The
agents run as an operator runs them (the installed console script, its own process); the simulators run in
this process so their request logs can be read: the client load sends chat completions, so a POST
/v1/completions at a backend can only be the agent's idle probe.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_simulator import Simulator

from .agents import FRONTENDS, INTERVAL, STUCK_SECONDS, Agent, AgentHAProxy, Load, Loaders, first_time
from .common import script
from .conftest import TIMINGS, Timer

pytestmark = pytest.mark.fleet

WITH_AGENT = ("lc", "rr")
#: How long the freeze lasts: past the agent's proof (STUCK_SECONDS), so stuck -> DOWN is seen too.
FREEZE = STUCK_SECONDS + 5.0


class AgentFleet:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sims: dict[str, Simulator] = {}
        self.agents: dict[str, Agent] = {}
        self.lb: AgentHAProxy | None = None
        self.loads: list[Load] = []

    def load(self, frontends: tuple[str, ...]) -> dict[str, Load]:
        assert self.lb is not None
        started = {f: Load(self.lb.url(f)).start() for f in frontends}
        self.loads += started.values()
        return started

    def status(self, server: str, frontends: tuple[str, ...] = WITH_AGENT) -> list[str]:
        assert self.lb is not None
        return [self.lb.status(f)[server] for f in frontends]

    def probes(self, name: str, since: float = 0.0) -> list[float]:
        """When the agent's idle probe (POST /v1/completions) reached backend `name`."""
        return [r.at for r in self.sims[name].requests()
                if r.method == "POST" and r.path == "/v1/completions" and r.at >= since]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[AgentFleet]:
    f = AgentFleet(tmp_path)
    try:
        # busy: every slot taken, counters moving; a real request waits 0.1 s for a slot, then is served
        f.sims = {n: Simulator(scenario="busy", busy_queue_seconds=0.1).start() for n in ("a", "b")}
        f.agents = {n: Agent(tmp_path, n, s.url).start() for n, s in f.sims.items()}
        f.lb = AgentHAProxy(tmp_path, {n: s.url for n, s in f.sims.items()},
                            {n: a.port for n, a in f.agents.items()}).start()
        yield f
    finally:
        for load in f.loads:
            load.stop()
        if f.lb:
            f.lb.stop()
        for a in f.agents.values():
            a.stop()
        for s in f.sims.values():
            s.stop()


def _failed(sent: list) -> int:
    return sum(not s.ok for s in sent)


def test_a_frozen_backend_is_drained_at_its_first_stalling_down_on_proof_and_back_when_it_resumes(fleet):
    with Timer("agent: freeze, drain, proof, resume"):
        loads = fleet.load(FRONTENDS)
        t_start = time.time()
        time.sleep(2.5)
        for f, load in loads.items():  # the setup does what it claims: both backends serve every frontend
            warm = load.between(t_start, time.time())
            assert warm and _failed(warm) == 0 and {s.server for s in warm} == {"a", "b"}, (f, warm)
        assert fleet.agents["a"].words() == fleet.agents["b"].words() == "up ready"

        t_freeze = time.time()
        fleet.sims["a"].set_scenario("stuck")  # engine frozen: /health, /v1/models and /metrics still answer
        last_ready, first_drain = first_time("agent a to say drain", lambda: fleet.agents["a"].words() == "drain", 8)
        assert fleet.agents["a"].reply().startswith("drain #stalling:"), fleet.agents["a"].reply()
        _, drained = first_time("HAProxy to drain a in both agent backends",
                                lambda: all(s.startswith("DRAIN") for s in fleet.status("a")), 5, every=0.05)
        # within two agent intervals of the first stalling (measured from the last poll that still said ready)
        assert drained - last_ready <= 2 * INTERVAL, (drained - last_ready, fleet.status("a"))
        assert fleet.status("a", ("lc_plain", "rr_plain")) == ["UP", "UP"]  # /health alone cannot see the freeze

        _, proven = first_time("agent a to prove it stuck", lambda: fleet.agents["a"].words() == "fail drain",
                               STUCK_SECONDS + 5)
        first_time("HAProxy to mark a DOWN", lambda: all(s.startswith("DOWN") for s in fleet.status("a")), 3)
        time.sleep(max(t_freeze + FREEZE - time.time(), 0))
        t_resume = time.time()
        ready, back, t_end = _serve_again(fleet, "a", loads, settle=2.5)

    figures = {f: _failed(loads[f].between(t_freeze, t_resume)) for f in FRONTENDS}
    sent = {f: len(loads[f].between(t_freeze, t_resume)) for f in FRONTENDS}
    TIMINGS["agent: freeze -> first drain reply (s)"] = first_drain - t_freeze
    TIMINGS["agent: last ready reply -> HAProxy DRAIN (s)"] = drained - last_ready
    TIMINGS["agent: resume -> HAProxy UP (s)"] = back - t_resume
    print(f"\nagent figures: failed/sent during the {t_resume - t_freeze:.1f} s freeze: "
          + ", ".join(f"{f} {figures[f]}/{sent[f]}" for f in FRONTENDS)
          + f"; freeze->drain reply {first_drain - t_freeze:.2f} s, last ready->HAProxy DRAIN {drained - last_ready:.2f} s,"
          f" freeze->proof {proven - t_freeze:.2f} s, resume->ready {ready - t_resume:.2f} s, ->UP {back - t_resume:.2f} s")

    for f in WITH_AGENT:
        # every new request after the drain goes to the healthy backend, and every one of them is served
        after = loads[f].between(drained, t_resume)
        assert after and all(s.ok and s.server == "b" for s in after), (f, [s for s in after if not s.ok or s.server != "b"])
        # what failed had started before the drain (in flight on the frozen backend, or sent to it before)
        late = [s for s in loads[f].between(t_freeze, t_resume) if not s.ok and s.started >= drained]
        assert late == [], (f, late)
        # back in rotation: the resumed backend serves again, nothing fails
        resumed = loads[f].between(back + 0.3, t_end)
        assert resumed and _failed(resumed) == 0 and "a" in {s.server for s in resumed}, (f, resumed)
    # without the agent the freeze goes on costing requests after the moment the agent drained the backend
    plain_late = [s for s in loads["rr_plain"].between(drained, t_resume) if not s.ok]
    assert plain_late, "roundrobin without the agent lost nothing to the freeze: the comparison proves nothing"
    assert figures["rr"] < figures["rr_plain"], figures

    # The agents never sent an inference request: both backends had work throughout (busy or frozen)
    assert fleet.probes("a") == [] and fleet.probes("b") == [], (fleet.probes("a"), fleet.probes("b"))
    # ...and do when the server is idle (the positive control of the count above)
    t_idle = time.time()
    fleet.sims["b"].set_scenario("idle")
    first_time("agent b's idle probe at b", lambda: len(fleet.probes("b", t_idle)) >= 1, 5)
    assert fleet.probes("a") == []
    assert fleet.agents["b"].words() == "up ready"
    for name, agent in fleet.agents.items():
        assert agent.stop() == 0, (name, agent.log.read_text())
        assert "Traceback" not in agent.log.read_text()


def _serve_again(fleet, name: str, loads: dict, settle: float) -> tuple[float, float, float]:
    """Backend `name` serves again: when its agent said ready, when HAProxy put it back, and the end of the
    load, `settle` seconds later (so the test sees it serve)."""
    fleet.sims[name].set_scenario("busy")
    _, ready = first_time(f"agent {name} to say up ready", lambda: fleet.agents[name].words() == "up ready", 5)
    _, back = first_time(f"HAProxy to put {name} back", lambda: fleet.status(name) == ["UP", "UP"], 4, every=0.05)
    time.sleep(settle)
    t_end = time.time()
    for load in loads.values():
        load.stop()
    return ready, back, t_end


def test_a_restarted_backend_is_drained_while_it_loads_never_down_flapping_and_back_once_it_serves(fleet, tmp_path):
    loaders = Loaders(tmp_path)
    try:
        with Timer("agent: restart and load"):
            loads = fleet.load(WITH_AGENT)
            time.sleep(1.5)
            port = fleet.sims["b"].port
            t_stop = time.time()
            fleet.sims["b"].set_scenario("dead")  # the old process gone...
            loader = loaders(port)                 # ...the new one binds its port and loads (refused meanwhile)
            _, starting = first_time("agent b to say starting",
                                     lambda: fleet.agents["b"].reply().startswith("drain #starting:"), 6)
            replies, statuses = [], []
            while time.time() < starting + 5.0:  # a model loading: every reply and HAProxy's view, sampled
                replies.append(fleet.agents["b"].reply())
                statuses.append((time.time(), fleet.status("b")))
                time.sleep(0.2)
            loader.kill()
            loader.wait()
            t_serve = time.time()
            ready, back, t_end = _serve_again(fleet, "b", loads, settle=2.0)  # serving: a new process
    finally:
        loaders.close()

    print(f"\nagent figures: restart -> starting reply {starting - t_stop:.2f} s, serving -> ready "
          f"{ready - t_serve:.2f} s, -> UP {back - t_serve:.2f} s; HAProxy while loading: "
          f"{sorted({str(row) for _, row in statuses})}")
    # drained, not down-flapping: from the first `starting` until it serves, the agent only ever drained
    assert replies and all(r.startswith("drain #starting:") for r in replies), sorted(set(replies))
    # HAProxy takes b out (the agent's DRAIN, its own check's DOWN after `fall`: "UP 1/2" is going down) and,
    # once out, never puts it back while it loads
    rows = [row for _, row in statuses]
    out = next((i for i, row in enumerate(rows) if not any(s.startswith("UP") for s in row)), None)
    assert out is not None and all(not s.startswith("UP") for row in rows[out:] for s in row), rows
    assert all(not s.startswith("UP") for at, row in statuses if at >= starting + 2 * INTERVAL for s in row), rows
    for f in WITH_AGENT:
        during = loads[f].between(starting + 2 * INTERVAL, t_serve)
        assert during and all(s.ok and s.server == "a" for s in during), (f, [s for s in during if not s.ok])
        after = loads[f].between(back + 0.3, t_end)
        assert after and _failed(after) == 0 and "b" in {s.server for s in after}, (f, after)
    assert fleet.probes("a") == [] and fleet.probes("b") == []


def test_the_agent_says_what_is_wrong_with_its_command_line_and_with_its_port(tmp_path):
    agent = script("check_vllm_agent")
    for bad, needle in ((["--interval", "0"], "--interval"), (["--url", "ftp://x"], "--url"),
                        (["--listen", "127.0.0.1:http"], "--listen"), (["--stuck-readings", "x"], "not a number")):
        run = subprocess.run([agent, *bad], capture_output=True, text=True, timeout=30)
        assert run.returncode == 2 and "usage:" in run.stderr and needle in run.stderr, (bad, run)
        assert "Traceback" not in run.stderr + run.stdout, run
    with Simulator(scenario="busy") as sim:
        first = Agent(tmp_path, "first", sim.url).start()
        try:
            run = subprocess.run([agent, "--url", sim.url, "--listen", f"127.0.0.1:{first.port}"],
                                 capture_output=True, text=True, timeout=30)
            assert run.returncode == 1 and f"cannot listen on 127.0.0.1:{first.port}" in run.stderr, run
            assert "Traceback" not in run.stderr, run
        finally:
            assert first.stop() == 0
