"""The liveness probe keeps the fleet restart budget (issue 55, point 2): the installed `check_vllm --probe liveness`
against the simulator frozen (proven stuck), and a loopback stand-in for Prometheus's HTTP API that answers the two
instant queries the budget asks (check_vllm.restart.fleet.queries). A failing liveness is a restart (the kubelet's,
or Docker's restarter's on `unhealthy`): over the budget it passes and says why while readiness still fails; within
it, it fails; Prometheus unreachable, --fleet-unasked decides and the line says the fleet was not asked. Only
loopback addresses."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from check_vllm.restart.fleet import queries
from tests.rig.loopback import Answer, Loopback, answer
from tests.rig.ports import free_port
from tests.rig.scripts import FAST, Result, run_check
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

PASS, FAIL = 0, 1
GROUP = "gpu-a"
SIZE, BUSY = queries(GROUP)
#: Stuck proven by one comparison without progress: the freeze is proven within a few runs, no clock waited out.
PROOF = ("--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
BUDGET_LINE = "fleet budget: {busy} of {size} servers of group gpu-a are proven stuck or starting (at most 2 at once)"


def one_line(r: Result) -> str:
    """A probe prints exactly one line, and nothing on stderr."""
    assert r.out.count("\n") == 1 and r.out.endswith("\n") and r.err == "", (r.out, r.err)
    return r.out[:-1]


def fleet(url: str, *more: str) -> tuple[str, ...]:
    return ("--fleet-prometheus", url, "--fleet-group", GROUP, "--fleet-max", "2", *more)


@contextmanager
def prometheus(size: int, busy: int, hang: bool = False) -> Iterator[tuple[Loopback, list[str]]]:
    """Prometheus's GET /api/v1/query for the budget's two expressions (the group's size, its servers proven stuck
    or starting), a 400 bad_data for any other; `hang`: no answer until the stand-in stops. Yields it and the
    expressions asked, in order."""
    asked: list[str] = []

    def query(h: BaseHTTPRequestHandler) -> Answer:
        expr = parse_qs(urlsplit(h.path).query).get("query", [""])[0]
        asked.append(expr)
        if hang:
            server.stopping.wait(60)
        value = {SIZE: size, BUSY: busy}.get(expr)
        if value is None:
            return answer(400, json.dumps({"status": "error", "errorType": "bad_data", "error": "not the budget's"}),
                          "application/json")
        doc = {"status": "success", "data": {"resultType": "vector",
                                             "result": [{"metric": {}, "value": [time.time(), str(value)]}]}}
        return answer(200, json.dumps(doc), "application/json")

    with Loopback({"GET /api/v1/query": query}) as server:
        yield server, asked


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Result]]:
    """A simulator serving busy, then frozen and proven stuck in the state file; `probe(*args)` runs the check
    against it with that state file."""
    sim = Simulator(scenario="busy").start()
    state = tmp_path_factory.mktemp("probe-fleet") / "state"

    def check(*args: str, timeout: float = 60) -> Result:
        return run_check(state, "-u", sim.url, *PROOF, *args, timeout=timeout)

    try:
        wait_for("a busy reading", lambda: check().word == "busy", 30)
        sim.set_scenario("stuck")
        seen: list[Result] = []
        wait_for("the freeze proven stuck", lambda: seen.append(check()) or seen[-1].word == "stuck", 60,
                 diag=lambda: "\n".join(map(str, seen[-5:])))
        assert seen[-1].code == 2, seen[-1]
        yield check
    finally:
        sim.stop()


def test_over_the_budget_liveness_passes_saying_why_and_readiness_still_fails(frozen):
    with prometheus(size=4, busy=3) as (_, asked):
        live = frozen("--probe", "liveness", *fleet(_.url))
        ready = frozen("--probe", "readiness", *fleet(_.url))
    assert live.code == PASS, live.out
    assert re.fullmatch(r"liveness pass in spite of: CRITICAL stuck: .+, but " + re.escape(BUDGET_LINE.format(
        busy=3, size=4)) + ": not restarting, a person decides", one_line(live)), live.out
    assert ready.code == FAIL and one_line(ready).startswith("readiness fail: CRITICAL stuck: "), ready.out
    assert sorted(asked) == sorted([SIZE, BUSY]), asked  # liveness asked its two questions; readiness none


def test_within_the_budget_liveness_fails_saying_the_count(frozen):
    with prometheus(size=4, busy=2) as (prom, asked):
        live = frozen("--probe", "liveness", *fleet(prom.url))
    assert live.code == FAIL, live.out
    assert re.fullmatch(r"liveness fail: CRITICAL stuck: .+; " + re.escape(BUDGET_LINE.format(busy=2, size=4)),
                        one_line(live)), live.out
    assert len(asked) == 2


@pytest.mark.parametrize(("unasked", "code", "said"), [
    ("hold", PASS, "holding (--fleet-unasked hold), a person decides"),
    ("restart", FAIL, "restarting (--fleet-unasked restart)"),
])
def test_prometheus_unreachable_the_operator_decides_and_the_line_says_not_asked(frozen, unasked, code, said):
    nowhere = f"http://127.0.0.1:{free_port()}"
    live = frozen("--probe", "liveness", *fleet(nowhere, "--fleet-unasked", unasked))
    line = one_line(live)
    assert live.code == code, live.out
    assert line.startswith(f"liveness {'pass in spite of' if code == PASS else 'fail'}: CRITICAL stuck: "), line
    assert f"the fleet was not asked (Prometheus at {nowhere}: connection refused): {said}" in line, line


def test_a_prometheus_that_never_answers_is_asked_within_t(frozen):
    """The question comes out of -t: Prometheus silent, the probe still ends on its own words, not on -t's alarm
    (which would pass it as a fault of ours): --fleet-unasked restart fails it, saying the fleet was not asked."""
    with prometheus(size=4, busy=3, hang=True) as (prom, asked):
        live = frozen("--probe", "liveness", "-t", "5", *fleet(prom.url, "--fleet-timeout", "1"))
    line = one_line(live)
    assert live.code == FAIL, live.out
    assert re.search(r"; the fleet was not asked \(Prometheus at http://127\.0\.0\.1:\d+: .* timed out after 1\.0 s\): "
                     r"restarting \(--fleet-unasked restart\)$", line), line
    assert asked == [SIZE]


def test_the_agents_liveness_fail_keeps_the_budget_too(tmp_path: Path):
    """--agent: the agent's own liveness fail is a restart as well; over the budget it passes, saying why."""
    said = "liveness fail: CRITICAL stuck: no progress for 131 s over 2 readings; 2 running, 2 waiting"
    agent = Loopback({"GET /liveness": lambda h: answer(503, said + "\n")})
    with agent, prometheus(size=4, busy=3) as (prom, asked):
        port = agent.url.rsplit(":", 1)[1]
        held = run_check(tmp_path / "state", "--probe", "liveness", "--agent", f"127.0.0.1:{port}",
                         "-u", "http://127.0.0.1:9", *fleet(prom.url))
        plain = run_check(tmp_path / "state", "--probe", "liveness", "--agent", f"127.0.0.1:{port}",
                          "-u", "http://127.0.0.1:9")
    assert held.code == PASS and one_line(held) == (
        f"liveness pass in spite of: {said.removeprefix('liveness fail: ')}, but "
        f"{BUDGET_LINE.format(busy=3, size=4)}: not restarting, a person decides"), held.out
    assert (plain.code, one_line(plain)) == (FAIL, said)
    assert len(asked) == 2 and agent.paths() == ["GET /liveness"] * 2
