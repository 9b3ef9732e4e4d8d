"""The restricted /metrics page on a REAL vLLM (issue 12 part 1): complete, same verdicts, cheaper for the server.

vLLM 0.32 serves its whole page on /metrics (its own route: any query ignored) and mounts prometheus_client's
app at /metrics/, which honours `name[]` by sample name. The check asks the latter for the samples
check_vllm.server.reading reads. Here: that page holds every family the verdict uses; the check's verdicts on
an idle, a saturated and a frozen server are the same whichever page it reads; and the API server, whose
event loop also serves the users, spends less CPU per check run on the restricted page (utime+stime of
its process from /proc/PID/stat, before and after N runs of the installed check).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.memory import codec as memory
from check_vllm.memory.statefile import check_file
from check_vllm.server import api, reading
from check_vllm.server.reading import parse
from tests.rig.scripts import Result
from tests.rig.vllm_server import VllmServer, _stat_fields, parse_samples, saturated

from .test_check_real import CHECK, CRITICAL, FAST, LONG, OK, WARNING, checked, ensure_idle

pytestmark = pytest.mark.real_vllm

#: Check runs per page for the CPU figure: the API server's clock ticks are 10 ms, a whole-page GET ~10 ms.
RUNS = 40
#: Seconds between two runs of one check: more than FAST's --min-gap.
GAP = 0.7


class Pair:
    """The installed check with two state directories: one reads the restricted page (as every check now
    starts), the other is told by its state file that this server is read by its whole page."""

    def __init__(self, root: Path, url: str) -> None:
        self.url = url
        self.restricted, self.whole = root / "restricted", root / "whole"
        store = check_file(self.whole, url, False)
        store.lock()
        try:
            store.save(memory.to_json(Memory(whole_page=Instant(time.time()))))
        finally:
            store.unlock()

    def run(self, state: Path, *args: str) -> Result:
        assert CHECK, "check_vllm is not installed (pip install -e .)"
        proc = subprocess.run([CHECK, "-u", self.url, "--state-dir", str(state), *args], capture_output=True,
                              text=True, timeout=90, env={k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"})
        print(f"{time.strftime('%T')} {state.name}: exit {proc.returncode}: {proc.stdout.strip()}")
        return checked(Result(proc.returncode, proc.stdout, proc.stderr))

    def both(self, *args: str) -> tuple[Result, Result]:
        return self.run(self.restricted, *args), self.run(self.whole, *args)

    def pages(self) -> tuple[bool, bool]:
        """Whether each check still reads the page it was set to (restricted: no whole_page remembered)."""
        def whole_page(state: Path) -> bool:
            return "whole_page" in json.loads(check_file(state, self.url, False).path.read_text())["data"]
        return not whole_page(self.restricted), whole_page(self.whole)


@pytest.fixture
def pair(vllm_server: VllmServer, tmp_path: Path) -> Pair:
    return Pair(tmp_path, vllm_server.url)


def _cpu_ticks(pid: int) -> int:
    fields = _stat_fields(pid)
    assert fields, f"no /proc/{pid}/stat"
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15 of /proc/PID/stat)


# --------------------------------------------------------------------------- the page


def test_the_restricted_page_has_every_family_the_verdict_uses(vllm_server: VllmServer):
    ensure_idle(vllm_server)
    with httpx.Client(timeout=10, follow_redirects=False) as c:
        small = c.get(vllm_server.url + api.RESTRICTED, headers={"Accept-Encoding": "identity"})
        zipped = c.get(vllm_server.url + api.RESTRICTED, headers={"Accept-Encoding": "gzip"})
        full = c.get(vllm_server.url + "/metrics")
        # why the trailing slash: vLLM's own /metrics route ignores the query and sends the whole page
        unslashed = c.get(vllm_server.url + api.RESTRICTED.replace("/metrics/?", "/metrics?"))
    assert small.status_code == zipped.status_code == full.status_code == unslashed.status_code == 200
    assert zipped.headers.get("content-encoding") == "gzip"
    assert len(unslashed.content) > 10 * len(small.content), (len(unslashed.content), len(small.content))
    asked = set(parse_qs(urlsplit(api.RESTRICTED).query)["name[]"])
    served = {name for name, _, _ in parse_samples(small.text)}
    on_the_whole_page = {name for name, _, _ in parse_samples(full.text)} & reading.RESTRICTABLE
    assert served <= asked, served - asked  # the server honours the filter: nothing else on the page
    assert served == on_the_whole_page, on_the_whole_page ^ served  # and drops nothing the verdict reads
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:iteration_tokens_total_count",
                 "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total",
                 "vllm:kv_cache_usage_perc", "vllm:engine_sleep_state", "process_start_time_seconds",
                 "vllm:generation_tokens_created"):
        assert name in served, name
    assert parse(small.text) == parse(full.text)  # an idle server: the two readings are one
    print(f"whole page {len(full.content)} B, restricted {len(small.content)} B, gzipped {zipped.num_bytes_downloaded} B")
    assert zipped.num_bytes_downloaded < 2048 and len(full.content) > 30_000


# --------------------------------------------------------------------------- the verdicts


def test_idle_verdict_is_the_same_on_either_page(vllm_server: VllmServer, pair: Pair):
    ensure_idle(vllm_server)
    a, b = pair.both(*FAST)
    assert (a.code, a.word) == (b.code, b.word) == (OK, "idle"), (a.out, b.out)
    assert "probe answered" in a.status and "probe answered" in b.status
    assert pair.pages() == (True, True)


def test_saturated_and_frozen_verdicts_are_the_same_on_either_page(vllm_server: VllmServer, pair: Pair):
    args = ("--stuck-seconds", "0", "--stuck-readings", "2", *FAST)
    ensure_idle(vllm_server)
    engine = vllm_server.engine_core_pid()
    with vllm_server.load(5, LONG, ignore_eos=True, repeat=True) as load:
        vllm_server.wait_for(saturated, timeout=90)
        for _ in range(2):
            a, b = pair.both(*args)
            assert (a.code, a.word) == (b.code, b.word) == (OK, "busy"), (a.out, b.out)
            assert a.perf["running"] == b.perf["running"] == "2", (a.out, b.out)
            assert float(a.perf["tokens_per_second"]) > 0 and float(b.perf["tokens_per_second"]) > 0
            time.sleep(GAP)
        os.kill(engine, signal.SIGSTOP)
        try:
            words: dict[str, list[tuple[int, str]]] = {"restricted": [], "whole": []}
            deadline = time.monotonic() + 90
            while not all(seen and seen[-1][1] == "stuck" for seen in words.values()):
                assert time.monotonic() < deadline, words
                time.sleep(GAP)
                for state in (pair.restricted, pair.whole):
                    if not (words[state.name] and words[state.name][-1][1] == "stuck"):
                        r = pair.run(state, *args)
                        words[state.name].append((r.code, r.word))
            for seen in words.values():  # stats sent just before the stop may still arrive: busy first
                settled = [w for w in seen if w != (OK, "busy")]
                assert settled == [(WARNING, "stalling"), (CRITICAL, "stuck")], words
        finally:
            os.kill(engine, signal.SIGCONT)
        assert not any(load.errors), load.errors
    assert pair.pages() == (True, True)
    ensure_idle(vllm_server)



# --------------------------------------------------------------------------- what the server spends


def test_the_restricted_page_costs_the_api_server_less_cpu(vllm_server: VllmServer, pair: Pair):
    ensure_idle(vllm_server)
    pid = vllm_server.pid
    assert pid and "api_server" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    hz = os.sysconf("SC_CLK_TCK")
    args = ("--no-probe", "--min-gap", "0")  # idle and unprobed: each run is one GET of /metrics, nothing else

    def per_run(state: Path | None) -> tuple[float, float]:
        """(seconds of API-server CPU per check run, seconds the runs took); None: as long idle, for the background."""
        before, t0 = _cpu_ticks(pid), time.monotonic()
        for _ in range(RUNS):
            if state is None:
                time.sleep(0.25)
            else:
                pair.run(state, *args)
        return (_cpu_ticks(pid) - before) / hz / RUNS, time.monotonic() - t0

    pair.both(*args)  # baselines taken; from here on every run is steady state
    idle, idle_for = per_run(None)
    restricted, r_for = per_run(pair.restricted)
    whole, w_for = per_run(pair.whole)
    # subtract what the idle server spends anyway over the time the runs took
    background = idle * RUNS / idle_for
    restricted_net = max(restricted - background * r_for / RUNS, 0.0)
    whole_net = max(whole - background * w_for / RUNS, 0.0)
    print(f"API server CPU per check run: whole page {whole_net * 1000:.1f} ms, restricted {restricted_net * 1000:.1f} ms "
          f"(raw {whole * 1000:.1f} / {restricted * 1000:.1f} ms, idle {background * 1000:.2f} ms/s)")
    assert pair.pages() == (True, True)
    assert restricted_net < whole_net, (restricted_net, whole_net)
    assert restricted_net < 0.75 * whole_net, (restricted_net, whole_net)
