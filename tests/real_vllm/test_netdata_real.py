"""The Netdata collector's tick against a REAL vLLM server: a frozen engine drives the state chart to stuck.

Same scenario as the check's (SIGSTOP on the EngineCore under load), run through netdata_plugin's JobCollector
with real clocks: the protocol text it would hand Netdata is parsed for the state chart's 0/1 dimensions.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from check_vllm.netdata.collector import JobCollector
from check_vllm.netdata.config import Job
from tests.rig.vllm_server import VllmServer, saturated

from .test_check_real import LONG, ensure_idle

pytestmark = pytest.mark.real_vllm


def state_word(text: str, job: str) -> str:
    """The verdict dimension set on the job's state chart (to 1 + its state) in one tick's protocol text."""
    inside, on = False, []
    for line in text.splitlines():
        if line.startswith("BEGIN "):
            inside = line.split()[1] == f"vllm_{job}.state"
        elif inside and line.startswith("SET ") and line.split()[-1] != "0":
            on.append(line.split()[1])
    assert len(on) == 1, text
    return on[0]


def ticks_until(c: JobCollector, job: str, want: str, timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.append(state_word(c.tick(), job))
        if seen[-1] == want:
            return seen
        time.sleep(1.0)
    raise AssertionError(f"never {want}: {seen}")


def test_netdata_collector_frozen_engine_goes_stuck_and_recovers(vllm_server: VllmServer):
    job = Job("real", vllm_server.url, update_every=1, stuck_readings=2, stuck_seconds=3, idle_completion=False)
    c = JobCollector(job, say=lambda message: None)
    ensure_idle(vllm_server)
    engine = vllm_server.engine_core_pid()
    with vllm_server.load(5, LONG, ignore_eos=True, repeat=True) as load:
        vllm_server.wait_for(saturated, timeout=90)
        ticks_until(c, "real", "busy", timeout=30)
        os.kill(engine, signal.SIGSTOP)
        try:
            seen = ticks_until(c, "real", "stuck", timeout=60)
            assert "stalling" in seen, seen  # never straight from busy to stuck
            assert c.probes_sent == 0
        finally:
            os.kill(engine, signal.SIGCONT)
        ticks_until(c, "real", "busy", timeout=60)
        assert not any(load.errors), load.errors
    ensure_idle(vllm_server)
