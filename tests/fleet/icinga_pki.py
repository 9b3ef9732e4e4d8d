"""Icinga 2 as a cluster on loopback: a PKI made with `icinga2 pki`, and nodes with their own directories.

    ca = make_ca(root / "ca")                 # icinga2 pki new-ca, in a DataDir of our own
    issue(ca, "gpu-01", node.dirs["DataDir"])  # icinga2 pki new-cert + sign-csr -> certs/gpu-01.{crt,key}, ca.crt

Every icinga2 command runs with ICINGA2_USER/GROUP=root (else it drops to the nagios user and cannot
write under /tmp or /root: `icinga2 pki new-ca` then dies with "Function call 'mkdir' ... Permission
denied" and leaves a crash report in its LogDir) and with -DDataDir/-DLogDir pointing into the test's tree,
so nothing is written to /var/lib/icinga2 or /var/log/icinga2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.rig.monitoring import free_port, tail, wait_for

ENV = {**os.environ, "ICINGA2_USER": "root", "ICINGA2_GROUP": "root"}
DIRS = ("ConfigDir", "DataDir", "LogDir", "CacheDir", "SpoolDir", "InitRunDir", "ZonesDir")
API_USER, API_PASSWORD = "root", "check_vllm-fleet"


def icinga2(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["icinga2", *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    if out.returncode != 0:
        pytest.fail(f"icinga2 {' '.join(args)} failed (exit {out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}",
                    pytrace=False)
    return out


class CA:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.log_dir = data_dir.parent / "ca-log"

    @property
    def crt(self) -> Path:
        return self.data_dir / "ca" / "ca.crt"

    def defines(self) -> list[str]:
        return [f"-DDataDir={self.data_dir}", f"-DLogDir={self.log_dir}"]


def make_ca(data_dir: Path) -> CA:
    """`icinga2 pki new-ca` with its DataDir in the test tree (the master's CA, as `node setup --master` makes)."""
    ca = CA(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    ca.log_dir.mkdir(parents=True, exist_ok=True)
    icinga2("pki", "new-ca", *ca.defines())
    if not ca.crt.exists():
        pytest.fail(f"icinga2 pki new-ca wrote no {ca.crt}", pytrace=False)
    return ca


def issue(ca: CA, cn: str, node_data_dir: Path) -> Path:
    """Key + CSR for `cn` (`icinga2 pki new-cert`), signed by the CA (`icinga2 pki sign-csr`), installed where
    the node's ApiListener reads them: DataDir/certs/CN.crt, CN.key and ca.crt."""
    certs = node_data_dir / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    key, csr, crt = certs / f"{cn}.key", certs / f"{cn}.csr", certs / f"{cn}.crt"
    icinga2("pki", "new-cert", "--cn", cn, "--key", str(key), "--csr", str(csr), *ca.defines())
    icinga2("pki", "sign-csr", "--csr", str(csr), "--cert", str(crt), *ca.defines())
    shutil.copy(ca.crt, certs / "ca.crt")
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(ca.crt), str(crt)], capture_output=True,
                              text=True, timeout=30)
    assert verified.returncode == 0 and f"{crt}: OK" in verified.stdout, verified.stdout + verified.stderr
    return crt


class Node:
    """One `icinga2 daemon` with its own ConfigDir, DataDir, LogDir, CacheDir, SpoolDir, run dir and API port."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.name = name
        self.dirs = {k: root / k.lower() for k in DIRS}
        self.dirs["ZonesDir"] = self.dirs["ConfigDir"] / "zones.d"
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.conf = self.dirs["ConfigDir"] / "icinga2.conf"
        self.log = self.dirs["LogDir"] / "icinga2.log"
        self.stdout = root / "icinga2.stdout"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: httpx.Client | None = None
        self.events: list[dict] = []
        self._stream_stop = threading.Event()

    def argv(self, *extra: str) -> list[str]:
        return ["icinga2", "daemon", "-c", str(self.conf), *[f"-D{k}={v}" for k, v in self.dirs.items()], *extra]

    def validate(self) -> str:
        out = subprocess.run(self.argv("-C"), capture_output=True, text=True, timeout=120, env=ENV)
        if out.returncode != 0:
            pytest.fail(f"icinga2 daemon -C rejected the {self.name} config:\n{out.stdout[-4000:]}", pytrace=False)
        return out.stdout

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv(), stdout=open(self.stdout, "w"), stderr=subprocess.STDOUT, env=ENV,
                                     start_new_session=True)

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            pytest.fail(f"icinga2 ({self.name}) exited with {code}:\n{self.diag()}", pytrace=False)
        return True

    def api(self) -> httpx.Client:
        """The REST API of this node (it needs an ApiUser in its config)."""
        if self.client is None:
            self.client = httpx.Client(base_url=f"https://127.0.0.1:{self.port}", verify=False, timeout=10,
                                       auth=(API_USER, API_PASSWORD), headers={"Accept": "application/json"})
        return self.client

    def wait_api(self, timeout: float = 60) -> None:
        def up() -> bool:
            self.alive()
            try:
                return self.api().get("/v1/status/IcingaApplication").status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(f"the REST API of {self.name}", up, timeout, diag=self.diag)

    def stream(self, types: list[str]) -> None:
        """Record every event of `types` from /v1/events in self.events (so no transient state is missed)."""
        def run() -> None:
            body = {"queue": f"check_vllm-fleet-{self.name}", "types": types}
            while not self._stream_stop.is_set():
                try:
                    with self.api().stream("POST", "/v1/events", json=body, timeout=None) as resp:
                        for line in resp.iter_lines():
                            if line.strip():
                                self.events.append(json.loads(line))
                except (httpx.HTTPError, ValueError, RuntimeError):
                    time.sleep(0.2)
        threading.Thread(target=run, daemon=True).start()

    def object(self, kind: str, name: str, attrs: list[str]) -> dict:
        resp = self.api().get(f"/v1/objects/{kind}/{name}", params={"attrs": attrs})
        resp.raise_for_status()
        return resp.json()["results"][0]["attrs"]

    def stop(self) -> None:
        self._stream_stop.set()
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the umbrella process and its worker (own session)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.client is not None:
            self.client.close()

    def diag(self, n: int = 30) -> str:
        return f"--- {self.name} icinga2.log\n{tail(self.log, n)}\n--- {self.name} stdout\n{tail(self.stdout, 10)}"
