"""Issue 29 on a real vLLM 0.32 started with VLLM_SERVER_DEV_MODE=1, as RL trainers run it: clients generating,
then POST /pause in keep and in wait mode for longer than --stuck-seconds. The check reads `paused`, never
CRITICAL, and the handler never restarts it; after POST /resume it is busy again; a SIGSTOP of the same engine
afterwards is still stuck. On the session's server, which runs in dev mode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.rig.scripts import script
from tests.rig.vllm_server import VllmServer

from .test_check_real import FAST, Check, check  # noqa: F401  (the fixture, shared)

pytestmark = pytest.mark.real_vllm
ARGS = ("--stuck-seconds", "6", "--stuck-readings", "2", "--probe-timeout", "5", *FAST)
#: Each phase lasts this long: past --stuck-seconds twice over.
PHASE = 16.0


def restart_handler(url: str, state: Path, counter: Path) -> None:
    subprocess.run([script("check_vllm_restart"), "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3", "--url",
                    url, "--state-dir", str(state), "--", sys.executable, "-c",
                    f"open({str(counter)!r}, 'a').write('restart\\n')"], capture_output=True, timeout=60)


def watch(check: Check, url: str, state: Path, counter: Path, seconds: float) -> list:  # noqa: F811
    """Checks every ~2 s for `seconds`, the handler called after each as on a HARD CRITICAL."""
    seen, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        seen.append(check(url, *ARGS))
        restart_handler(url, state, counter)
        time.sleep(2.0)
    return seen


def test_a_pause_for_a_weight_update_is_paused_never_stuck_and_never_restarted(  # noqa: F811
        vllm_server: VllmServer, check, tmp_path):  # noqa: F811
    """keep (requests frozen in the queue), then wait (those in flight finish, new ones queue), on one server."""
    srv = vllm_server
    counter, state = tmp_path / "restarts.txt", tmp_path / "state"
    load = srv.load(3, max_tokens=1500, repeat=True)
    try:
        assert srv.wait_for(lambda t: "vllm:num_requests_running" in t, timeout=60)
        time.sleep(3.0)
        assert check(srv.url, *ARGS).word in ("busy", "restarted")
        for mode in ("keep", "wait"):
            paused_then_resumed(srv, check, state, counter, mode)
        os.kill(srv.engine_core_pid(), signal.SIGSTOP)  # a real hang of the same engine: still stuck
        try:
            frozen = watch(check, srv.url, state, counter, PHASE)
            assert "stuck" in {r.word for r in frozen}, [r.first for r in frozen]
            assert "paused" not in {r.word for r in frozen}, [r.first for r in frozen]
        finally:
            os.kill(srv.engine_core_pid(), signal.SIGCONT)
    finally:
        load.stop()


def paused_then_resumed(srv: VllmServer, check: Check, state: Path, counter: Path, mode: str) -> None:  # noqa: F811
    paused = httpx.post(f"{srv.url}/pause", params={"mode": mode}, timeout=120)
    assert paused.status_code == 200, paused.text
    assert httpx.get(f"{srv.url}/is_paused", timeout=10).json() == {"is_paused": True}
    seen = watch(check, srv.url, state, counter, PHASE)  # three times --stuck-seconds
    assert all(r.code != 2 for r in seen), (mode, [r.first for r in seen])
    assert "paused" in {r.word for r in seen}, (mode, [r.first for r in seen])
    assert not counter.exists(), (mode, [r.first for r in seen])
    assert httpx.post(f"{srv.url}/resume", timeout=60).status_code == 200
    deadline, resumed = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        time.sleep(2.0)
        resumed = check(srv.url, *ARGS)
        if resumed.word == "busy":
            break
    assert resumed is not None and resumed.word == "busy", (mode, resumed.first if resumed else None)
