"""check_vllm_restart's fleet restart budget (issue 55, point 2) end to end: the installed handler, a planted stuck
verdict, and a loopback server answering Prometheus's HTTP API (GET /api/v1/query) as Prometheus does. Over the
budget it does not restart and says why; within it, it restarts; when Prometheus cannot be asked, --fleet-unasked
decides and the line says the fleet was not asked; an OK or SOFT call never asks."""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from check_vllm.memory.statefile import check_file
from tests.rig.loopback import Answer, Loopback, answer
from tests.rig.ports import free_port
from tests.rig.scripts import Result, run_script

URL = "http://127.0.0.1:1"  # the server's process is nowhere: the planted verdict is all the handler goes on


def plant_stuck(state: Path) -> None:
    state.mkdir(exist_ok=True, mode=0o700)
    check_file(state, URL, proxy=False).save(
        {"verdict": {"word": "stuck", "state": 2, "text": "no progress over 2 readings", "at": time.time() - 1,
                     "engines": {}}})


def prometheus(size: int, busy: int, delay: float = 0.0) -> Loopback:
    """Prometheus's instant query answer: the group's size for count(check_vllm_agent_up...), else `busy`."""
    def query(h: BaseHTTPRequestHandler) -> Answer:
        expr = parse_qs(urlsplit(h.path).query)["query"][0]
        time.sleep(delay)
        value = size if expr.startswith("count(check_vllm_agent_up") else busy
        doc = {"status": "success", "data": {"resultType": "vector",
                                             "result": [{"metric": {}, "value": [time.time(), str(value)]}]}}
        return answer(200, json.dumps(doc), "application/json")
    return Loopback({"GET /api/v1/query": query})


def handler(tmp: Path, where: str, *extra: str, state: str = "CRITICAL", status: bool = False) -> Result:
    plant_stuck(tmp / "state")
    fleet = ("--fleet-prometheus", where, "--fleet-group", "gpu-a", "--fleet-max", "2", *extra)
    common = ("--url", URL, "--state-dir", str(tmp / "state"), "--no-post-mortem", *fleet)
    if status:
        return run_script("check_vllm_restart", "--status", *common)
    command = [sys.executable, "-c", f"open({str(tmp / 'restarted')!r}, 'w').write('yes')"]
    return run_script("check_vllm_restart", "--state", state, "--state-type", "HARD", "--attempt", "3", *common,
                      "--", *command, env=dict(os.environ))


def test_over_the_budget_it_does_not_restart_and_says_why(tmp_path):
    with prometheus(size=8, busy=5) as prom:
        out = handler(tmp_path, prom.url)
        status = handler(tmp_path, prom.url, status=True)
    assert out.code == 0, out.out + out.err
    assert not (tmp_path / "restarted").exists()
    assert ": restart refused: verdict 'stuck'" in out.out, out.out
    assert out.out.rstrip().endswith("but fleet budget: 5 of 8 servers of group gpu-a are proven stuck or starting "
                                     "(at most 2 at once): not restarting, a person decides"), out.out
    assert status.code == 1 and status.out.startswith("VLLM_RESTART WARNING - held back: verdict 'stuck'"), status.out
    assert "fleet budget: 5 of 8" in status.out
    assert prom.paths() == ["GET /api/v1/query"] * 4  # two questions a call


def test_within_the_budget_it_restarts_and_says_how_many(tmp_path):
    with prometheus(size=8, busy=2) as prom:
        out = handler(tmp_path, prom.url)
    assert out.code == 0 and ": restarted: verdict 'stuck'" in out.out, out.out + out.err
    assert "fleet budget: 2 of 8 servers of group gpu-a are proven stuck or starting (at most 2 at once)" in out.out
    assert (tmp_path / "restarted").read_text() == "yes"


def test_prometheus_refused_restarts_by_default_and_holds_when_asked_to(tmp_path):
    nowhere = f"http://127.0.0.1:{free_port()}"
    out = handler(tmp_path, nowhere)
    assert out.code == 0 and ": restarted: " in out.out, out.out + out.err
    assert f"the fleet was not asked (Prometheus at {nowhere}: connection refused): restarting " \
           "(--fleet-unasked restart)" in out.out, out.out
    (tmp_path / "again").mkdir()
    held = handler(tmp_path / "again", nowhere, "--fleet-unasked", "hold")
    assert held.code == 0 and ": restart refused: " in held.out, held.out + held.err
    assert "the fleet was not asked (Prometheus at" in held.out and "holding (--fleet-unasked hold), a person " \
           "decides" in held.out, held.out
    assert not (tmp_path / "again" / "restarted").exists()


def test_a_slow_prometheus_costs_at_most_the_fleet_timeout(tmp_path):
    with prometheus(size=8, busy=1, delay=30) as prom:
        began = time.monotonic()
        out = handler(tmp_path, prom.url, "--fleet-timeout", "1", "--fleet-unasked", "hold")
        took = time.monotonic() - began
    assert ": restart refused: " in out.out and "the fleet was not asked (Prometheus at" in out.out, out.out
    assert "timed out" in out.out, out.out
    assert took < 5, took  # the product's own figure x5: --fleet-timeout 1 (the answer would take 30 s)


def test_no_data_for_the_group_is_not_asked(tmp_path):
    with prometheus(size=0, busy=0) as prom:
        out = handler(tmp_path, prom.url, "--fleet-unasked", "hold")
    assert "the fleet was not asked (Prometheus knows no server of group gpu-a)" in out.out, out.out


def test_an_ok_or_warning_call_never_asks_the_fleet(tmp_path):
    with prometheus(size=8, busy=5) as prom:
        ok = handler(tmp_path, prom.url, state="OK")
        warning = handler(tmp_path, prom.url, state="WARNING")
    assert ok.code == 0 and ": no restart: service is OK" in ok.out, ok.out
    assert warning.code == 0 and ": no restart: service is WARNING" in warning.out, warning.out
    assert prom.paths() == []
