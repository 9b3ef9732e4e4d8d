"""A server that answers is never restarted; one that never answers is (issue 10 part 4), end to end.

The policy: a /metrics answer within the run's -t budget is a reading, however slowly it came (the
request timeouts follow -t, they are not a fixed 10 s), and is judged like any other. Only a server
that gives no answer at all, over the same proof as "stuck" (--stuck-readings runs spanning
--stuck-seconds), is CRITICAL "unresponsive", the verdict the restart handler acts on.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.rig.scripts import script

from .conftest import CRITICAL, FAST, OK, WARNING, Answer, Loopback, answer

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "real"
HANDLER = script("check_vllm_restart")


def slow_page(seconds: float, stop: threading.Event):
    def route(h: BaseHTTPRequestHandler) -> Answer:
        stop.wait(seconds)
        return answer(200, (PAGES / "saturated.txt").read_bytes(), "text/plain; version=0.0.4")
    return route


def handler(url: str, state_dir: Path, marker: Path) -> subprocess.CompletedProcess:
    assert HANDLER, "check_vllm_restart is not installed"
    return subprocess.run([HANDLER, "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3", "--url", url,
                           "--state-dir", str(state_dir), "--", sys.executable, "-c",
                           f"open({str(marker)!r}, 'w').write('restarted')"],
                          capture_output=True, text=True, timeout=60)


def test_a_metrics_answer_after_16_s_within_t_20_is_a_reading_and_never_restarted(check, tmp_path):
    stop = threading.Event()
    marker = tmp_path / "restarted"
    with Loopback({"GET /metrics": slow_page(16.0, stop)}) as srv:
        try:
            r = check("-u", srv.url, "-t", "20", "--reread-delay", "0.3", "--min-gap", "0.3",
                      "--stuck-readings", "1", "--stuck-seconds", "0")
        finally:
            stop.set()
    assert r.seconds >= 15, r.seconds  # it really waited for the slow answer
    assert (r.code, r.word) == (OK, "busy"), r.out  # a reading: busy, not "unresponsive"
    h = handler(srv.url, tmp_path / "state", marker)
    assert h.returncode == 0 and "no restart" in h.stdout and "'busy'" in h.stdout, h.stdout + h.stderr
    assert not marker.exists()


def test_a_server_that_accepts_and_never_answers_is_restarted_after_the_proof(check, tmp_path):
    stop = threading.Event()
    marker = tmp_path / "restarted"
    with Loopback({"GET /metrics": slow_page(3600.0, stop)}) as srv:
        try:
            args = ("-u", srv.url, "-t", "5", *FAST, "--stuck-readings", "2", "--stuck-seconds", "0")
            first = check(*args)
            assert (first.code, first.word) == (WARNING, "unresponsive"), first.out
            assert "timed out after" in first.status, first.out
            h = handler(srv.url, tmp_path / "state", marker)
            assert "no restart" in h.stdout and not marker.exists(), h.stdout  # one run is no proof
            time.sleep(0.5)
            second = check(*args)
            assert (second.code, second.word) == (CRITICAL, "unresponsive"), second.out
            assert "2 readings in a row" in second.status, second.out
            h = handler(srv.url, tmp_path / "state", marker)
        finally:
            stop.set()
    assert h.returncode == 0 and "restarted" in h.stdout, h.stdout + h.stderr
    assert marker.read_text() == "restarted"


def test_request_timeouts_follow_t(check, tmp_path):
    """-t 14: the /metrics request may take up to what the run has left, not a fixed 10 s."""
    stop = threading.Event()
    with Loopback({"GET /metrics": slow_page(3600.0, stop)}) as srv:
        try:
            r = check("-u", srv.url, "-t", "14", *FAST)
        finally:
            stop.set()
    assert r.word == "unresponsive" and r.seconds >= 12, (r.seconds, r.out)
    assert "timed out after 1" in r.status and "timed out after 10.0 s" not in r.status, r.out
