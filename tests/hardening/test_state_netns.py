"""Two servers behind one loopback URL in two network namespaces (two containers' 127.0.0.1:8000) sharing one
state directory (issue 36, case 4): each keeps its own memory; the frozen one is proven stuck, the busy one
stays busy, and neither is ever called a load balancer.

The second namespace is made with unshare(1) (root), its loopback brought up with ip(8); the check runs in
it through nsenter(1), as a probe runs in its container."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.ports import free_port
from tests.rig.scripts import FAST, Result, run_script
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not all(map(shutil.which, ("unshare", "nsenter", "ip"))),
                                reason="needs root, unshare, nsenter and ip: a second network namespace")

ARGS = ("--stuck-seconds", "2", "--stuck-readings", "2", *FAST)


def answers_in(inner: subprocess.Popen, url: str) -> bool:
    """Whether GET url/metrics answers in the namespace of the process `inner`."""
    code = "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=1)"
    return subprocess.run(["nsenter", f"--net=/proc/{inner.pid}/ns/net", sys.executable, "-c", code, url + "/metrics"],
                          capture_output=True, timeout=10).returncode == 0


def check_in(inner: subprocess.Popen, *args: str) -> Result:
    """The installed check run in the namespace of the process `inner`, as a probe runs in its container."""
    return run_script("check_vllm", *args, prefix=("nsenter", f"--net=/proc/{inner.pid}/ns/net"))


@pytest.fixture
def two_servers() -> Iterator[tuple[Simulator, subprocess.Popen]]:
    """A busy simulator on this namespace's 127.0.0.1:PORT and a stuck one on the same address in a new one."""
    port = free_port()
    inner = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable, "-m",
         "vllm_simulator", "--port", str(port), "--scenario", "stuck"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Simulator(port=port, scenario="busy") as outer:
            wait_for("the simulator in the second namespace", lambda: answers_in(inner, outer.url), 20)
            yield outer, inner
    finally:
        inner.kill()
        inner.wait(10)


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_two_servers_on_one_loopback_address_in_two_namespaces_keep_apart(two_servers, tmp_path: Path, host):
    """127.0.0.1 (issue 36), and 0.0.0.0 as vLLM prints its URL at start (issue 46, case 2): both reach this
    host's server, so both are keyed by the namespace they are reached in."""
    outer, inner = two_servers
    url = outer.url.replace("127.0.0.1", host)
    shared = tmp_path / "volume"
    shared.mkdir()
    shared.chmod(0o1777)  # a Docker volume made from the image's directory
    busy, frozen = [], []
    for _ in range(8):
        busy.append(run_script("check_vllm", "-u", url, "--state-dir", str(shared), *ARGS))
        frozen.append(check_in(inner, "-u", url, "--state-dir", str(shared), *ARGS))
        if frozen[-1].word == "stuck":
            break
        time.sleep(0.5)
    assert all(r.code == 0 and r.word == "busy" for r in busy[1:]), [r.first for r in busy]
    assert frozen[-1].code == 2 and frozen[-1].word == "stuck", [r.first for r in frozen]
    assert not any(r.word == "balancer" for r in busy + frozen), [r.first for r in busy + frozen]
    files = sorted(p.name for p in (shared / "uid-0").iterdir() if p.suffix == ".json")
    assert len(files) == 2, files  # one state file per server
