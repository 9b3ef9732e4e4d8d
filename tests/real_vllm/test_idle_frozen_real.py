"""A frozen engine with no work: /metrics says idle, so only the 1-token probe can tell, and it must.

SIGSTOP on the EngineCore of an idle real vLLM: the API server keeps answering /metrics (all zero), the
probe queues and never answers, a re-read shows nothing moved: CRITICAL stuck. SIGCONT: idle again.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.rig.vllm_server import VllmServer

from .test_check_real import CRITICAL, FAST, OK, WARNING, Check, check, ensure_idle, run_until

pytestmark = pytest.mark.real_vllm
__all__ = ["check"]  # the fixture, used by name


def test_idle_frozen_engine_is_stuck_through_the_probe(vllm_server: VllmServer, check: Check):
    # issue 12: an unanswered idle probe is WARNING first and CRITICAL only after the proof (2 readings here)
    args = ("--probe-timeout", "3", "--stuck-seconds", "0", *FAST)
    ensure_idle(vllm_server)
    engine = vllm_server.engine_core_pid()
    os.kill(engine, signal.SIGSTOP)
    try:
        first = check(vllm_server.url, *args)
        assert (first.code, first.word) == (WARNING, "stalling"), first.out
        assert "probe" in first.status and ("unanswered" in first.status or "no answer" in first.status), first.out
        r = check(vllm_server.url, *args)
        assert (r.code, r.word) == (CRITICAL, "stuck"), r.out
        assert vllm_server.get("/health", timeout=5).status_code == 200  # what a liveness check would see
    finally:
        os.kill(engine, signal.SIGCONT)
    seen = run_until(check, vllm_server.url, args, lambda res: res.word == "idle", timeout=60)
    assert seen[-1].code == OK, [s.first for s in seen]
    ensure_idle(vllm_server)
