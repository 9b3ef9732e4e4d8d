"""Ask the server for only what the check reads (issue 12 part 1), end to end.

vLLM serves /metrics twice: its own route (the whole page, ~50 KB) and prometheus_client's app mounted at
/metrics/, which honours `name[]`. The check asks the latter for the samples check_vllm.server.reading reads; a
server that does not serve it as asked is read by its whole page in the same run, from then on, and is
asked again after an hour. The installed check against the simulator (which serves both like vLLM) and
loopback servers that serve one, the other, or neither.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.vocab import OK, WARNING
from check_vllm.memory.codec import from_json, to_json
from check_vllm.memory.statefile import check_file
from check_vllm.netdata.collector import JobCollector
from check_vllm.netdata.config import Job
from check_vllm.server import api, reading
from check_vllm.server.calls import RESTRICTED_RETRY
from check_vllm.server.reading import parse
from tests.rig.loopback import Answer, Loopback, answer
from vllm_simulator import Simulator

from .conftest import FAST

WHOLE, MOUNT = "GET /metrics", "GET /metrics/"
PAGE_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def paths(srv: Loopback) -> list[str]:
    return [f"{s.method} {s.path}" for s in srv.seen]


def saved(state: Path, url: str) -> dict:
    """The memory part of the state file of `url`."""
    return json.loads(check_file(state, url, False).path.read_text())["data"]


def age_whole_page(state: Path, url: str, seconds: float) -> None:
    """Move the state file's "read the whole page since" back by `seconds`, on both clocks."""
    path = check_file(state, url, False).path
    doc = json.loads(path.read_text())
    since = doc["data"]["whole_page"]
    since["since"] -= seconds
    if "mono" in since:
        since["mono"] -= seconds
    path.write_text(json.dumps(doc))


def whole(sim: Simulator) -> Callable[[BaseHTTPRequestHandler], Answer]:
    """The simulator's whole page, whatever the query (vLLM's own /metrics route)."""
    return lambda h: answer(200, sim.metrics_text(), PAGE_TYPE)


def forwarded(sim: Simulator) -> Callable[[BaseHTTPRequestHandler], Answer]:
    """What the simulator's /metrics/ answers for the request's own query (prometheus_client's app)."""
    def route(h: BaseHTTPRequestHandler) -> Answer:
        got = httpx.get(sim.url + h.path, headers={"Accept-Encoding": "identity"}, timeout=5)
        return answer(got.status_code, got.content, got.headers["content-type"])
    return route


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


# --------------------------------------------------------------------------- the URL


def test_the_url_asks_for_exactly_what_the_reading_reads():
    split = urlsplit(api.RESTRICTED)
    assert split.path == "/metrics/"  # the trailing slash: vLLM's own /metrics route ignores any query
    names = parse_qs(split.query, strict_parsing=True)["name[]"]
    assert set(names) == reading.RESTRICTABLE and names == sorted(names)  # one owner of the list; one URL every run
    for name in ("process_start_time_seconds", "vllm:engine_sleep_state", "vllm:gpu_cache_usage_perc",
                 "vllm:generation_tokens_created", "vllm:iteration_tokens_total_created"):
        assert name in names
    assert len(api.RESTRICTED) < 1024 and api.RESTRICTED.isascii() and " " not in api.RESTRICTED


#: Simulator variants whose counters stand still, so that two pages read a moment apart show the same numbers.
STILL = {
    "frozen with work": ("stuck", {}),
    "V0 names (no engine label)": ("stuck", {"legacy": True}),
    "multiprocess (no process_*, no _created)": ("stuck", {"multiprocess": True}),
    "eight data-parallel engines": ("stuck", {"engines": 8}),
    "asleep": ("sleeping", {}),
    "idle": ("idle", {}),
}


@pytest.mark.parametrize("kind", list(STILL))
def test_the_restricted_page_reads_like_the_whole_one(kind):
    scenario, options = STILL[kind]
    with Simulator(scenario=scenario, **options) as sim:
        full = httpx.get(sim.url + "/metrics", timeout=5)
        small = httpx.get(sim.url + api.RESTRICTED, headers={"Accept-Encoding": "identity"}, timeout=5)
        zipped = httpx.get(sim.url + api.RESTRICTED, headers={"Accept-Encoding": "gzip"}, timeout=5)
    assert small.status_code == 200 and zipped.headers.get("content-encoding") == "gzip"
    assert parse(small.text) == parse(full.text)
    assert len(small.content) * 5 < len(full.content), (len(small.content), len(full.content))
    if "engines" not in options:
        assert zipped.num_bytes_downloaded < 1024, zipped.num_bytes_downloaded


# --------------------------------------------------------------------------- steady state


def test_steady_state_is_one_get_of_the_restricted_page(run_check, state: Path):
    with Simulator(scenario="busy") as sim:
        first = run_check("-u", sim.url, *FAST)  # no baseline yet: two readings
        assert (first.code, first.word) == (OK, "busy"), first.out
        for _ in range(3):
            time.sleep(0.35)
            r = run_check("-u", sim.url, *FAST)
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert r.perf["running"] == "2" and r.perf["waiting"] == "3" and float(r.perf["tokens_per_second"]) > 0
        assert [(q.method, q.path) for q in sim.requests()] == [("GET", "/metrics/")] * 5
        assert sim.inference_requests() == []
        assert "whole_page" not in saved(state, sim.url)


def test_the_query_reaches_the_server_as_written(run_check):
    with Simulator(scenario="busy") as sim:
        targets: list[str] = []

        def mount(h: BaseHTTPRequestHandler) -> Answer:
            targets.append(h.path)
            return forwarded(sim)(h)

        with Loopback({MOUNT: mount, WHOLE: whole(sim)}) as srv:
            for _ in range(2):
                assert run_check("-u", srv.url, *FAST).word == "busy"
                time.sleep(0.35)
            assert paths(srv) == [MOUNT] * 3
            sent = [sorted(name.lower() for name in seen.headers) for seen in srv.seen]
    assert targets == [api.RESTRICTED] * 3
    # nothing HTTP/1.1 already means (httpx's Accept: */*, Connection: keep-alive): bytes of every run
    assert sent == [["accept-encoding", "host", "user-agent"]] * 3, sent


# --------------------------------------------------------------------------- the fallback


FAILING_MOUNTS: dict[str, Callable[[BaseHTTPRequestHandler], Answer] | None] = {
    "404 (an older vLLM)": None,  # Loopback: 404 on any route it lacks
    "405": lambda h: answer(405, '{"detail":"Method Not Allowed"}', "application/json"),
    "500": lambda h: answer(500, "Internal Server Error"),
    "html 200 (a proxy's page)": lambda h: answer(200, "<html><body>Not here</body></html>", "text/html"),
    "empty 200 (a filter that finds nothing)": lambda h: answer(200, "", PAGE_TYPE),
    "only process_start_time_seconds": lambda h: answer(200, "process_start_time_seconds 1.7e+09\n", PAGE_TYPE),
}


@pytest.mark.parametrize("kind", list(FAILING_MOUNTS))
def test_a_server_that_fails_the_restricted_page_is_read_whole_at_once_and_from_then_on(run_check, state, kind):
    with Simulator(scenario="busy") as sim:
        routes = {WHOLE: whole(sim)}
        if FAILING_MOUNTS[kind] is not None:
            routes[MOUNT] = FAILING_MOUNTS[kind]
        with Loopback(routes) as srv:
            first = run_check("-u", srv.url, *FAST)
            # the run that found out lost nothing: the whole page at once, then its usual second reading
            assert (first.code, first.word) == (OK, "busy"), first.out
            assert paths(srv) == [MOUNT, WHOLE, WHOLE], paths(srv)
            assert "whole_page" in saved(state, srv.url)
            srv.seen.clear()
            for _ in range(2):
                time.sleep(0.35)
                r = run_check("-u", srv.url, *FAST)
                assert (r.code, r.word) == (OK, "busy") and r.perf["waiting"] == "3", r.out
            assert paths(srv) == [WHOLE, WHOLE], paths(srv)


def test_the_restricted_page_is_asked_again_after_the_retry_interval(run_check, state):
    with Simulator(scenario="busy") as sim:
        routes = {WHOLE: whole(sim)}
        with Loopback(routes) as srv:
            run_check("-u", srv.url, *FAST)
            since = saved(state, srv.url)["whole_page"]["since"]
            # not yet: just short of the interval
            age_whole_page(state, srv.url, RESTRICTED_RETRY - 60)
            srv.seen.clear()
            assert run_check("-u", srv.url, *FAST).word == "busy"
            assert paths(srv) == [WHOLE]
            # past it, and still an older server: asked once, the whole page in the same run, the clock renewed
            age_whole_page(state, srv.url, 120)
            srv.seen.clear()
            time.sleep(0.35)
            assert run_check("-u", srv.url, *FAST).word == "busy"
            assert paths(srv) == [MOUNT, WHOLE]
            renewed = saved(state, srv.url)["whole_page"]["since"]
            assert renewed > since - 1
            # past it again, and the server was upgraded meanwhile: the restricted page from then on
            age_whole_page(state, srv.url, RESTRICTED_RETRY + 1)
            routes[MOUNT] = forwarded(sim)
            srv.seen.clear()
            for _ in range(2):
                time.sleep(0.35)
                r = run_check("-u", srv.url, *FAST)
                assert (r.code, r.word) == (OK, "busy"), r.out
            assert paths(srv) == [MOUNT, MOUNT]
            assert "whole_page" not in saved(state, srv.url)


def test_a_clock_step_back_asks_the_restricted_page_again(run_check, state):
    with Simulator(scenario="busy") as sim, Loopback({WHOLE: whole(sim)}) as srv:
        run_check("-u", srv.url, *FAST)
        age_whole_page(state, srv.url, -7200)  # "since" in the future: no clock spans it
        srv.seen.clear()
        assert run_check("-u", srv.url, *FAST).word == "busy"
        assert paths(srv) == [MOUNT, WHOLE]


def test_a_page_that_ignores_the_filter_parses_as_ever(run_check, state):
    with Simulator(scenario="busy") as sim, Loopback({MOUNT: whole(sim)}) as srv:  # no plain /metrics at all
        for _ in range(3):
            r = run_check("-u", srv.url, *FAST)
            assert (r.code, r.word) == (OK, "busy") and r.perf["running"] == "2", r.out
            time.sleep(0.35)
        assert paths(srv) == [MOUNT] * 4
        assert "whole_page" not in saved(state, srv.url)


@pytest.mark.parametrize("status", [301, 307, 308])
@pytest.mark.parametrize("keep_query", [False, True])
def test_a_redirect_to_the_whole_page_is_followed_once_then_not_asked_for(run_check, state, status, keep_query):
    def to_whole(h: BaseHTTPRequestHandler) -> Answer:
        query = urlsplit(h.path).query if keep_query else ""
        return answer(status, "", Location="/metrics" + (f"?{query}" if query else ""))

    with Simulator(scenario="busy") as sim, Loopback({MOUNT: to_whole, WHOLE: whole(sim)}) as srv:
        first = run_check("-u", srv.url, *FAST)
        assert (first.code, first.word) == (OK, "busy"), first.out
        assert paths(srv) == [MOUNT, WHOLE, WHOLE], paths(srv)  # the redirect's page is the first reading
        srv.seen.clear()
        time.sleep(0.35)
        assert run_check("-u", srv.url, *FAST).word == "busy"
        assert paths(srv) == [WHOLE]


def test_a_redirect_loop_on_the_restricted_page_falls_back(run_check, state):
    with Simulator(scenario="busy") as sim:
        loop = {MOUNT: lambda h: answer(307, "", Location="/metrics/?again=1"), WHOLE: whole(sim)}
        with Loopback(loop) as srv:
            r = run_check("-u", srv.url, *FAST)
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert paths(srv).count(MOUNT) == 4 and paths(srv)[-2:] == [WHOLE, WHOLE], paths(srv)


def test_when_both_pages_fail_the_whole_page_speaks_and_nothing_is_learnt(run_check, state):
    with Loopback({MOUNT: lambda h: answer(500, "oops"), WHOLE: lambda h: answer(500, "Internal Server Error")}) as srv:
        r = run_check("-u", srv.url, *FAST)
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        assert r.status.startswith("unresponsive: /metrics answered HTTP 500"), r.out
        assert paths(srv) == [MOUNT, WHOLE, "GET /health"]  # a read that failed asks whether the engine died
        assert "whole_page" not in saved(state, srv.url)


def test_a_restricted_page_too_slow_is_unresponsive_at_once_not_read_twice(run_check, state):
    # -t 10, not 4: the run leaves itself 1 s of -t for the state file and its output, which eight workers on two
    # cores once outlasted ('timed out after 4 s waiting for writing the state file'); the page is slower still
    with Simulator(scenario="slow", slow_seconds=60) as sim:
        r = run_check("-u", sim.url, "-t", "10", *FAST)
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        assert "GET /metrics timed out after" in r.status and "%5B" not in r.out and "name[]" not in r.out, r.out
        assert [q.path for q in sim.requests()] == ["/metrics/"]  # no second wait on the same slow server
        assert "whole_page" not in saved(state, sim.url)


def test_nothing_listening_is_down_without_a_second_try(run_check):
    with Simulator(scenario="dead") as sim:
        r = run_check("-u", sim.url, *FAST)
    assert r.word == "down" and "%5B" not in r.out and "name[]" not in r.out, r.out


# --------------------------------------------------------------------------- the memory


def test_the_memory_field_round_trips_and_old_files_read_as_before():
    at = Instant(1.7e9, 1234.5, "boot-1")
    assert from_json(to_json(Memory(whole_page=at))).whole_page == at
    assert "whole_page" not in to_json(Memory())
    assert from_json({}).whole_page is None  # a file from an older check_vllm: the restricted page is asked
    for junk in ("soon", 3, [], {"since": "x"}, {"since": float("nan")}, None):
        assert from_json({"whole_page": junk}).whole_page is None
    assert from_json({"whole_page": {"since": 1.7e9}}).whole_page == Instant(1.7e9)


# --------------------------------------------------------------------------- the Netdata collector


def test_the_collector_keeps_the_choice_in_memory():
    wall, mono = [1.7e9], [100.0]

    def tick(c: JobCollector) -> str:
        wall[0] += 1.0
        mono[0] += 1.0
        time.sleep(0.02)
        return c.tick()

    with Simulator(scenario="busy") as sim:
        with Loopback({WHOLE: whole(sim)}) as srv:
            c = JobCollector(Job("t", srv.url), wall=lambda: wall[0], mono=lambda: mono[0], say=lambda m: None)
            for _ in range(3):
                tick(c)
            assert paths(srv) == [MOUNT, WHOLE, WHOLE, WHOLE]
            assert c.memory.whole_page is not None
            mono[0] += RESTRICTED_RETRY
            srv.seen.clear()
            tick(c)
            assert paths(srv) == [MOUNT, WHOLE]
        c = JobCollector(Job("s", sim.url), wall=lambda: wall[0], mono=lambda: mono[0], say=lambda m: None)
        sim.clear_requests()
        for _ in range(3):
            tick(c)
        assert [q.path for q in sim.requests()] == ["/metrics/"] * 3
        assert c.memory.whole_page is None
