"""`check_vllm --probe KIND --reuse-verdict S` (issue 36, the probes' cost): liveness and readiness share one
reading a period. A probe passes on a passing verdict another run saved at most S seconds ago without a
request to the server; a verdict that would fail, an older one, and every startup probe read the server afresh.
The installed check against the simulator on loopback; the simulator's request log says who read."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.rig.scripts import FAST, run_script
from vllm_simulator import Simulator

DECISION = ("--stuck-seconds", "0", "--stuck-readings", "2")


def probe(kind: str, sim: Simulator, state: Path, *extra: str):
    return run_script("check_vllm", "--probe", kind, "-u", sim.url, "--state-dir", str(state), *DECISION, *FAST,
                      *extra)


def reads(sim: Simulator) -> int:
    return sum(1 for r in sim.requests() if r.path.rstrip("/") == "/metrics")


def test_readiness_after_liveness_passes_on_its_verdict_without_a_request(sim: Simulator, tmp_path: Path):
    sim.set_scenario("busy")
    live = probe("liveness", sim, tmp_path, "--reuse-verdict", "5")  # nothing saved yet: it reads
    assert live.code == 0 and re.fullmatch(r"liveness pass: busy: .+", live.out.strip()), live.out
    before = reads(sim)
    assert before >= 1
    ready = probe("readiness", sim, tmp_path, "--reuse-verdict", "5")
    assert ready.code == 0, ready.out
    assert re.fullmatch(r"readiness pass: busy: .+ \(reused: the verdict of [0-5] s ago\)", ready.out.strip()), ready.out
    assert reads(sim) == before, "a reused verdict sent no request"
    start = probe("startup", sim, tmp_path, "--reuse-verdict", "5")
    assert start.code == 0 and "reused:" not in start.out, start.out
    assert reads(sim) > before, "startup reads the server: a saved verdict may be of the process before"


def test_an_older_verdict_is_read_afresh(sim: Simulator, tmp_path: Path):
    sim.set_scenario("busy")
    probe("liveness", sim, tmp_path)
    time.sleep(1.2)
    before = reads(sim)
    r = probe("readiness", sim, tmp_path, "--reuse-verdict", "1")
    assert r.code == 0 and "reused:" not in r.out, r.out
    assert reads(sim) > before


def test_a_freeze_is_found_within_the_reuse_window_and_a_fail_is_never_reused(sim: Simulator, tmp_path: Path):
    sim.set_scenario("busy")
    probe("liveness", sim, tmp_path)
    time.sleep(0.6)
    sim.set_scenario("stuck")
    probe("liveness", sim, tmp_path)  # the freeze's first reading still moved: busy
    ready = probe("readiness", sim, tmp_path, "--reuse-verdict", "1")
    assert ready.code == 0 and ready.out.endswith("(reused: the verdict of 0 s ago)\n"), ready.out
    time.sleep(1.1)  # the window: the next probe reads
    ready = probe("readiness", sim, tmp_path, "--reuse-verdict", "1")
    assert ready.code == 1 and ready.out.startswith("readiness fail: WARNING stalling: "), ready.out
    assert "reused:" not in ready.out
    live = probe("liveness", sim, tmp_path, "--reuse-verdict", "1")  # a first sign passes liveness: reused
    assert live.code == 0 and live.out.startswith("liveness pass in spite of: WARNING stalling: "), live.out
    assert "reused:" in live.out
    time.sleep(1.1)
    live = probe("liveness", sim, tmp_path, "--reuse-verdict", "1")
    assert live.code == 1 and live.out.startswith("liveness fail: CRITICAL stuck: "), live.out
    before = reads(sim)
    again = probe("readiness", sim, tmp_path, "--reuse-verdict", "5")  # the stuck verdict fails it: read afresh
    assert again.code == 1 and "reused:" not in again.out and reads(sim) > before, again.out


def test_a_reuse_out_of_bounds_is_a_usage_fault_that_passes(sim: Simulator, tmp_path: Path):
    sim.set_scenario("busy")
    r = probe("liveness", sim, tmp_path, "--reuse-verdict", "31")
    assert r.code == 0, r.out
    assert r.out.strip() == ("liveness pass in spite of: UNKNOWN usage: --reuse-verdict must be from 0 to 30 "
                             "seconds (see --help)"), r.out


def test_two_probes_fired_together_share_one_reading(sim: Simulator, tmp_path: Path):
    """As the kubelet fires them (liveness and readiness tick together): one takes the state lock and reads, the
    other waits on the lock and answers with the verdict it saved."""
    sim.set_scenario("busy")
    probe("liveness", sim, tmp_path)  # a baseline, as a pod's earlier periods leave one...
    time.sleep(1.2)  # ...older than the window: this period's first probe must read
    before = reads(sim)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda kind: probe(kind, sim, tmp_path, "--reuse-verdict", "1"),
                            ("liveness", "readiness")))
    assert all(r.code == 0 for r in got), [r.out for r in got]
    assert sum("reused:" in r.out for r in got) == 1, [r.out for r in got]
    assert reads(sim) == before + 1, "one /metrics read for the two probes"
