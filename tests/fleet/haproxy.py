"""A real HAProxy (Debian's haproxy 2.6) started by the test on loopback, in front of two simulators.

One process, foreground (`haproxy -db`), its own generated config and nothing of /etc/haproxy:
  - frontend `lc`:  `balance leastconn` over both backends, health-checked with GET /health (what an operator
                    configures in front of vLLM; the frozen engine answers /health 200 and stays UP);
  - frontend `rr`:  `balance roundrobin` over the same two, so consecutive /metrics reads alternate;
  - `stats`:        the stats page, read as CSV to see what HAProxy thinks of each server.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.rig.monitoring import REPO, free_port, tail

DEPS = REPO / ".ci" / "fleet-deps.sh"


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
    if found:
        return found
    out = subprocess.run(["bash", str(DEPS)], capture_output=True, text=True, timeout=900)
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
    if out.returncode != 0 or not found:
        pytest.fail(f"no haproxy binary and {DEPS} failed (exit {out.returncode}):\n{out.stderr[-3000:]}",
                    pytrace=False)
    return found


def config(backends: dict[str, str], ports: dict[str, int]) -> str:
    servers = {
        "lc": "\n".join(f"    server {n} {u.split('//', 1)[1]} check inter 500ms fall 2 rise 1"
                        for n, u in backends.items()),
        "rr": "\n".join(f"    server {n} {u.split('//', 1)[1]}" for n, u in backends.items()),
    }
    return f"""global
    maxconn 200
    nbthread 1

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option redispatch
    retries 1

frontend lc
    bind 127.0.0.1:{ports['lc']}
    default_backend vllm_leastconn

backend vllm_leastconn
    balance leastconn
    option httpchk GET /health
{servers['lc']}

frontend rr
    bind 127.0.0.1:{ports['rr']}
    default_backend vllm_roundrobin

backend vllm_roundrobin
    balance roundrobin
{servers['rr']}

listen stats
    bind 127.0.0.1:{ports['stats']}
    stats enable
    stats uri /stats
"""


class HAProxy:
    def __init__(self, root: Path, backends: dict[str, str]) -> None:
        self.root = root
        self.ports = {k: free_port() for k in ("lc", "rr", "stats")}
        self.cfg = root / "haproxy.cfg"
        self.cfg.write_text(config(backends, self.ports))
        self.log = root / "haproxy.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.bin = haproxy_binary()

    def url(self, frontend: str) -> str:
        return f"http://127.0.0.1:{self.ports[frontend]}"

    def start(self) -> HAProxy:
        checked = subprocess.run([self.bin, "-c", "-f", str(self.cfg)], capture_output=True, text=True, timeout=30)
        if checked.returncode != 0:
            pytest.fail(f"haproxy -c rejected {self.cfg}:\n{checked.stdout}{checked.stderr}", pytrace=False)
        self.proc = subprocess.Popen([self.bin, "-db", "-f", str(self.cfg)], stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"haproxy exited with {self.proc.returncode}:\n{tail(self.log)}", pytrace=False)
            try:
                if all(s["status"] == "UP" for s in self.servers("vllm_leastconn").values()):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"haproxy: backends not UP within 15 s: {self._servers_or_error()}\n{tail(self.log)}",
                    pytrace=False)

    def _servers_or_error(self) -> object:
        try:
            return self.servers("vllm_leastconn")
        except OSError as err:
            return err

    def servers(self, backend: str) -> dict[str, dict[str, str]]:
        """HAProxy's own view of each server of `backend` (status UP/DOWN, sessions), from the stats CSV."""
        with urllib.request.urlopen(f"{self.url('stats')}/stats;csv", timeout=5) as resp:
            text = resp.read().decode().lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {r["svname"]: r for r in rows if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")}

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
