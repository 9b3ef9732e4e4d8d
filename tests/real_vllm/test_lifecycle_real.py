"""Issue 27 on a real vLLM: an engine that dies under a live API server (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1) is
down at once and restarted once by the handler; a server started `--config FILE` (its port only in the YAML)
goes through an operator's restart as starting, never CRITICAL, never restarted. Each test starts its own
server (the session's cannot carry these settings); they run after the session server's tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rig.scripts import script
from tests.rig.vllm_server import VllmServer, free_port, group_members

from .test_check_real import CHECK, FAST, Check, check  # noqa: F401  (the fixture, shared)

pytestmark = [pytest.mark.real_vllm, pytest.mark.real_vllm_last]


def handler(url: str, state_dir: Path, counter: Path, *extra: str) -> subprocess.CompletedProcess:
    """check_vllm_restart as a scheduler calls it on a HARD CRITICAL; the restart command only counts."""
    argv = [script("check_vllm_restart"), "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3", "--url", url,
            "--state-dir", str(state_dir), *extra, "--", sys.executable, "-c",
            f"open({str(counter)!r}, 'a').write('restart\\n')"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def count(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_a_config_file_server_through_an_operators_restart_then_its_engine_dead_under_a_live_api_server(
        heavy, vllm_venv, tiny_model, check, tmp_path):  # noqa: F811
    """One server, two boots (the operator's restart is one): started `--config FILE` (the port only in the YAML)
    with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1."""
    srv = VllmServer(vllm_venv, tiny_model, port=free_port(), log_path=tmp_path / "lifecycle.log",
                     config_file=tmp_path / "vllm.yaml", extra_env={"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"})
    assert "--port" not in srv.command() and "--config" in srv.command()
    srv.start(timeout=240)
    try:
        operators_restart_reads_starting(srv, check, tmp_path)
        engine_dead_is_down_and_restarted_once(srv, check, tmp_path)
    finally:
        pgid = srv.pid
        srv.stop()
    assert group_members(pgid) == []


def operators_restart_reads_starting(srv: VllmServer, check: Check, tmp_path: Path) -> None:  # noqa: F811
    """f2970e2 found no process for the port (it is only in the file): down at once, restarted mid-load."""
    counter, state = tmp_path / "restarts-restart.txt", tmp_path / "state"
    assert check(srv.url, *FAST).code == 0
    srv.stop()  # the operator's restart: stop, then start; the next process loads its model
    srv.start(wait=False)
    seen = []
    deadline = time.monotonic() + 240
    while True:
        r = check(srv.url, *FAST)
        seen.append(r)
        if r.code == 2:
            handler(srv.url, state, counter)
        if r.word not in ("starting", "stopping"):
            break
        assert time.monotonic() < deadline, [s.first for s in seen]
        time.sleep(2.0)
    assert "starting" in [s.word for s in seen], [s.first for s in seen]
    assert all(s.code != 2 for s in seen), [s.first for s in seen]
    assert seen[-1].word in ("restarted", "idle"), [s.first for s in seen]
    assert count(counter) == 0


def engine_dead_is_down_and_restarted_once(srv: VllmServer, check: Check, tmp_path: Path) -> None:  # noqa: F811
    """f2970e2's handler found the API server alive and served: "stopping", refused at every call."""
    os.kill(srv.engine_core_pid(), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while srv.get("/health", timeout=5).status_code != 503:  # the API server learns of it in ~0.5 s
        assert time.monotonic() < deadline, "/health never turned 503"
        time.sleep(0.2)
    time.sleep(1.0)
    dead = check(srv.url, *FAST)
    assert (dead.code, dead.word) == (2, "down"), dead.out
    assert "engine died" in dead.status, dead.out
    assert srv.proc is not None and srv.proc.poll() is None, "the API server should live on (keep-alive)"
    counter = tmp_path / "restarts-dead.txt"
    first = handler(srv.url, tmp_path / "state", counter)
    assert count(counter) == 1, first.stdout + first.stderr
    assert ": restarted: verdict 'down'" in first.stdout, first.stdout
    again = handler(srv.url, tmp_path / "state", counter)  # the cooldown holds the next one
    assert count(counter) == 1, again.stdout
