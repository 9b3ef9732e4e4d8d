"""The post-mortem collector (issue 48) against the REAL llama-server: with its decode loop stopped (the main
thread held by ptrace, the HTTP threads alive) /proc gives every thread's state, wchan and kernel stack, and
the collection returns within its budget whatever gdb can do beside the rig's tracer; with the server running,
gdb's `thread apply all bt` names its threads and frames, and the server serves on once gdb has detached."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from check_vllm.postmortem import dumpers, versions
from check_vllm.postmortem.collect import collect
from check_vllm.postmortem.retention import size
from tests.real_llamacpp.conftest import REPORTS, TIMINGS
from tests.rig.bundles import outcome, text
from tests.rig.llamacpp_server import LlamaServer, thread_state

pytestmark = pytest.mark.real_llamacpp

EVIDENCE = {"verdict": "stuck", "status": "VLLM CRITICAL - stuck", "engine": "llama.cpp"}


def said_version(server: LlamaServer) -> str:
    """What the handler's version reader asks: the server's own word (/props build_info), never its binary."""
    got = server.get("/props", timeout=5)
    return versions.answered("/props", got.status_code, got.content) or ""


def busy(server: LlamaServer, processing: float = 2) -> None:
    deadline = time.monotonic() + 60
    while server.counter("requests_processing") != processing or server.counter("n_decode_total") == 0:
        assert time.monotonic() < deadline, server.metrics_text()[-2000:]
        time.sleep(0.2)


def test_decode_loop_stopped_proc_stacks_always_within_the_budget(server: LlamaServer, tmp_path: Path):
    tools = dumpers.find()
    assert tools.gdb, "gdb must be installed for this tier (.ci/run: apt-get install gdb)"
    with server.load(2) as load:
        busy(server)
        with server.decode_stopped():
            assert thread_state(server.pid) in ("t", "T")
            started = time.monotonic()
            result = collect(tmp_path / "pm", [server.pid], lambda: server.metrics_text(timeout=5), EVIDENCE,
                             budget=20, tools=tools)
            took = time.monotonic() - started
        load.stop()
    TIMINGS["post-mortem, decode loop stopped"] = took
    REPORTS["post-mortem steps, decode loop stopped"] = "\n".join(f"{s}: {o}" for s, o in result.steps)
    assert took < 21, result.steps
    described = text(result, f"proc-{server.pid}.txt")
    assert f"thread {server.pid} (llama-server) state t" in described, described[:3000]
    threads = described.count("\nthread ")
    assert threads >= 3 and described.count(" wchan ") == threads and "[<0>]" in described
    assert "llama-server" in text(result, "tree.txt")
    # its executable is never run to ask (issue 51): the version is what the server itself says, or nothing
    assert f"pid {server.pid}: llama.cpp " in text(result, "versions.txt")
    assert "(never run to ask its version)" in text(result, "versions.txt")
    # the rig's own tracer holds the main thread, and a thread has one tracer: gdb is refused, and says so
    gdb = outcome(result, f"gdb {server.pid}")
    assert gdb.startswith("failed in ") and "already traced by process" in gdb, gdb
    assert outcome(result, "metrics").startswith(("ok", "failed", "timed out"))


def test_gdb_names_llama_servers_threads_and_frames_and_it_serves_on(server: LlamaServer, tmp_path: Path):
    tools = dumpers.find()
    assert tools.gdb, "gdb must be installed for this tier (.ci/run: apt-get install gdb)"
    with server.load(2) as load:
        busy(server)
        started = time.monotonic()
        result = collect(tmp_path / "pm", [server.pid], lambda: server.metrics_text(timeout=5), EVIDENCE,
                         budget=20, tools=tools, version_reader=lambda: said_version(server))
        took = time.monotonic() - started
        TIMINGS["post-mortem of a running llama-server"] = took
        assert "the server says /props: b11434" in text(result, "versions.txt"), text(result, "versions.txt")
        assert result.path is not None
        REPORTS["post-mortem bundle (running llama-server)"] = f"{size(result.path)} bytes in {took:.1f} s: " + \
            "; ".join(f"{s}: {o}" for s, o in result.steps)
        assert outcome(result, f"gdb {server.pid}").startswith("ok"), result.steps
        gdb = text(result, f"gdb-{server.pid}.txt")
        assert gdb.count("\nThread ") >= 3, gdb[:3000]
        assert "llama" in gdb or "server_context" in gdb, gdb[:3000]
        assert outcome(result, "metrics").startswith("ok") and "llamacpp:" in text(result, "metrics.txt")
        before = server.counter("n_decode_total")
        time.sleep(1.0)
        assert server.counter("n_decode_total") > before, "gdb detached: the decode loop runs on"
        assert thread_state(server.pid) not in ("t", "T")
        load.stop()
    assert took < 21
