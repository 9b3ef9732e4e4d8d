"""Replay the /metrics pages recorded from a REAL server of EVERY release in the matrix (tests/fixtures/real/
<release>/, written by tests/real_vllm_matrix/record.py; 0.32.0's are tests/fixtures/real/*.txt), so a change
that breaks one release's reading shows here, without vLLM:

- through the pure functions: `reading.parse` + `judge.assess`, page after page, carrying the memory;
- end to end: the installed check_vllm against a loopback server handing out the pages in order.

Each release must read as it was recorded: idle (and probe), busy, busy -> stalling -> stuck once frozen,
restarted after the restart.
"""

from __future__ import annotations

import http.server
import json
import re
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

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
NAMES = ("idle", "saturated", "saturated_b", "frozen_a", "frozen_b", "restarted")
RELEASE_DIRS = sorted((d for d in REAL.iterdir() if d.is_dir() and re.fullmatch(r"\d+\.\d+\.\d+", d.name)),
                      key=lambda d: [int(x) for x in d.name.split(".")])
#: 0.32.0, the real_vllm tier's release, keeps its pages one level up (tests/fixtures/real/README.md).
DIRS = {"0.32.0": REAL, **{d.name: d for d in RELEASE_DIRS}}
RELEASES = sorted(DIRS, key=lambda r: [int(x) for x in r.split(".")])


def test_every_matrix_release_has_recorded_pages():
    assert len(RELEASE_DIRS) >= 4, f"no per-release pages under {REAL}: run tests/real_vllm_matrix/record.py"
    for d in RELEASE_DIRS:
        missing = [n for n in NAMES if not (d / f"{n}.txt").is_file()]
        assert not missing, f"{d}: missing {missing}"


class Pages:
    def __init__(self, release: str):
        self.release = release
        self.text = {n: (DIRS[release] / f"{n}.txt").read_text() for n in NAMES}
        self.read = {n: parse(t) for n, t in self.text.items()}
        # judge after every recorded process started (the restart text says how long ago)
        self.t0 = max(r.process_start or 0.0 for r in self.read.values()) + 60.0

    def chain(self, names: list[str], settings: Settings, step: float = 2.0) -> list[Verdict]:
        memory, out = Memory(), []
        for i, n in enumerate(names):
            v = assess(memory, self.read[n], settings, self.t0 + i * step)
            memory = v.memory
            out.append(v)
        return out


@pytest.fixture(scope="module", params=RELEASES)
def pages(request) -> Pages:
    return Pages(request.param)


# --------------------------------------------------------------------------- the pure functions

def test_idle_page_reads_one_engine_no_work_and_asks_for_the_probe(pages: Pages):
    r: Reading = pages.read["idle"]
    assert len(r.engines) == 1 and r.model == "tiny-llama", (r.engines.keys(), r.model)
    (e,) = r.engines.values()
    assert (r.work, e.running, e.waiting) == (0, 0, 0)
    assert e.finished == 1 and e.generation_tokens == 1 and e.steps == 1  # the recorder's one completion
    assert e.kv_cache is not None and e.asleep is False
    v = assess(Memory(), r, Settings(), pages.t0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")


def test_saturated_pages_are_busy_with_rates(pages: Pages):
    first, second = pages.chain(["saturated", "saturated_b"], Settings())
    assert (first.word, first.action) == ("busy", "reread")  # no baseline: read again, never guess
    assert (second.word, second.code, second.action) == ("busy", OK, None)
    assert second.tokens_per_second > 0 and second.steps_per_second > 0
    assert second.running == 2 and second.waiting >= 1


def test_frozen_pages_go_busy_stalling_stuck(pages: Pages):
    fast = Settings(stuck_seconds=0.0)
    vs = pages.chain(["saturated", "saturated_b", "frozen_a", "frozen_b", "frozen_b"], fast)
    assert [(v.word, v.code) for v in vs][-2:] == [("stalling", WARNING), ("stuck", CRITICAL)], \
        [v.summary for v in vs]
    assert all(v.word == "busy" for v in vs[:3]), [v.summary for v in vs]
    assert vs[-1].tokens_per_second == 0 and vs[-1].running == 2


def test_frozen_pages_need_the_seconds_too(pages: Pages):
    vs = pages.chain(["frozen_a", "frozen_b", "frozen_b"], Settings())  # stuck_seconds 120
    assert [v.word for v in vs] == ["busy", "stalling", "stalling"]
    late = assess(vs[-1].memory, pages.read["frozen_b"], Settings(), pages.t0 + 4 + 120)
    assert (late.word, late.code) == ("stuck", CRITICAL)


def test_restarted_page_is_a_new_process_never_compared(pages: Pages):
    before, after = pages.chain(["saturated", "restarted"], Settings())
    assert (after.word, after.code, after.action) == ("restarted", OK, "probe"), after.summary
    assert after.tokens_per_second is None and after.steps_per_second is None
    again = assess(after.memory, pages.read["restarted"], Settings(), pages.t0 + 4)
    assert again.word == "idle"


# --------------------------------------------------------------------------- end to end, installed check

CHECK = script("check_vllm")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    queue: list[str]  # /metrics pages still to hand out; the last one repeats
    log: list[tuple[str, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"  # /metrics and the restricted /metrics/?name[]=..
        self.server.log.append(("GET", path))
        if path == "/metrics":  # the whole recorded page either way: a superset of any restricted read
            q = self.server.queue
            self._send((q.pop(0) if len(q) > 1 else q[0]).encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            self._send(json.dumps({"object": "list", "data": [{"id": "tiny-llama"}]}).encode(), "application/json")
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.server.log.append(("POST", self.path))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(json.dumps({"object": "text_completion", "model": "tiny-llama",
                               "choices": [{"index": 0, "text": "x"}],
                               "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode(),
                   "application/json")

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve(pages: Pages, tmp_path: Path) -> Iterator:
    assert CHECK, "check_vllm is not installed (pip install -e .)"
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.queue, srv.log = [pages.text["idle"]], []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"

    def run(*names: str) -> tuple[Result, list[tuple[str, str]]]:
        srv.queue = [pages.text[n] for n in names]
        srv.log.clear()
        # --min-gap 0: the pages carry their own progress; --stuck-seconds 0: readings alone decide
        p = subprocess.run([CHECK, "-u", url, "--state-dir", str(tmp_path), "--min-gap", "0",
                            "--reread-delay", "0", "--stuck-seconds", "0"],
                           capture_output=True, text=True, timeout=60)
        r = Result(p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in r.out + r.err, r.err
        r.perf  # noqa: B018 - asserts the perfdata syntax
        return r, list(srv.log)

    try:
        yield run
    finally:
        srv.shutdown()
        srv.server_close()


def test_e2e_idle_busy_frozen_restarted(serve):
    r, log = serve("idle")
    assert (r.code, r.word) == (OK, "idle") and "probe answered" in r.status, r.out
    assert log == [("GET", "/metrics"), ("POST", "/v1/completions")]
    r, log = serve("saturated", "saturated_b")  # the idle baseline had no work: fresh comparison
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert float(r.perf["tokens_per_second"]) > 0 and r.perf["running"] == "2", r.out
    assert ("POST", "/v1/completions") not in log, "no inference request at a server with work"
    r, _ = serve("frozen_a")
    assert (r.code, r.word) == (OK, "busy"), r.out
    r, _ = serve("frozen_b")
    assert (r.code, r.word) == (WARNING, "stalling"), r.out
    r, log = serve("frozen_b")
    assert (r.code, r.word) == (CRITICAL, "stuck"), r.out
    assert log == [("GET", "/metrics")], log
    r, log = serve("restarted")
    assert (r.code, r.word) == (OK, "restarted"), r.out
    assert r.perf["tokens_per_second"] == "U" and r.perf["steps_per_second"] == "U", r.out
    assert log == [("GET", "/metrics"), ("POST", "/v1/completions")]  # the idle new process: probed


# --------------------------------------------------------------------------- data parallel (multiprocess mode)

DP = REAL / "0.32.0-dp2"


def test_data_parallel_warm_page_reads_two_idle_engines_without_process_metrics():
    r = parse((DP / "warm.txt").read_text())
    assert sorted(r.engines) == ["0", "1"] and r.work == 0
    assert r.process_start is None and all(e.created is None for e in r.engines.values())
    v = assess(Memory(), r, Settings(), 2_000_000_000.0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")


def test_data_parallel_fresh_page_reads_idle():
    """A fresh multiprocess page has counters (all zero) but no request gauges until an engine's first
    request: an engine that has served nothing has no work, so the page reads idle (the check probes)."""
    r = parse((DP / "fresh.txt").read_text())
    assert sorted(r.engines) == ["0", "1"] and r.work == 0
    v = assess(Memory(), r, Settings(), 2_000_000_000.0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")
