"""A real Icinga 2 daemon on 127.0.0.1 with the shipped definitions: started, validated, read through its REST API,
stopped; shared by the monitoring tier and the incident's rig."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.package import layout
from tests.rig.monitoring import CONTRIB, FAST_CHECK, free_port, icinga_value, stop_group, tail, wait_for


def shipped_includes(conf: Path | None = None) -> str:
    """The shipped definitions: the .deb's through the ITL (CHECK_VLLM_INSTALLED=deb), else contrib/.

    The package's commands come from `include <plugins-contrib>` alone; with conf, contrib's files are
    copied there first, as an operator copies them to /etc/icinga2/conf.d.
    """
    if layout.deb():
        return f'include <plugins-contrib>\ninclude "{layout.EXAMPLES}/icinga2/vllm-services.conf"\n'
    if conf is None:
        return f'include "{CONTRIB}/icinga2/vllm-commands.conf"\ninclude "{CONTRIB}/icinga2/vllm-services.conf"\n'
    for f in ("vllm-commands.conf", "vllm-services.conf"):
        (conf / f).write_text((CONTRIB / "icinga2" / f).read_text())
    return 'include "vllm-commands.conf"\ninclude "vllm-services.conf"\n'

API_USER, API_PASSWORD = "root", "check_vllm-test"
HOST = "vllm-host"


def service(name: str, url: str, state_dir: Path, restart: list[str], log: Path, *, by_port: bool = False,
            **extra) -> str:
    # by_port: give only vars.vllm_port and let both commands build the URL from the host address
    where = {"vllm_port": int(url.rsplit(":", 1)[1])} if by_port else {"vllm_url": url}
    vars_ = {**where, "vllm_state_dir": str(state_dir), "vllm_restart_command": restart,
             "vllm_restart_log": str(log), "vllm_restart_max_verdict_age": 30,
             **{f"vllm_{k}": v for k, v in FAST_CHECK.items()}, **extra}
    body = "\n".join(f"  vars.{k} = {icinga_value(v)}" for k, v in vars_.items())
    return f"""
object Service "{name}" {{
  host_name = "{HOST}"
  check_command = "vllm"
  event_command = "vllm-restart"
  check_interval = 1s
  retry_interval = 1s
  max_check_attempts = 3
  check_timeout = 20s
{body}
}}
"""


class Icinga2:
    def __init__(self, root: Path, plugins: Path, services: str) -> None:
        self.root = root
        self.dirs = {k: root / k.lower() for k in ("ConfigDir", "DataDir", "LogDir", "CacheDir", "SpoolDir",
                                                   "InitRunDir")}
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = self.dirs["LogDir"] / "icinga2.log"
        self.stdout = root / "icinga2.stdout"
        certs = self.dirs["DataDir"] / "certs"
        certs.mkdir()
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-keyout", str(certs / "localhost.key"),
                        "-out", str(certs / "localhost.crt")], check=True, capture_output=True, timeout=60)
        (certs / "ca.crt").write_bytes((certs / "localhost.crt").read_bytes())
        conf = self.dirs["ConfigDir"]
        includes = shipped_includes(conf)
        self.conf = conf / "icinga2.conf"
        self.conf.write_text(f"""
const PluginDir = "/usr/lib/nagios/plugins"
const PluginContribDir = "{plugins}"
const NodeName = "localhost"
const ZoneName = "localhost"
const TicketSalt = ""
include <itl>
include <plugins>
object Endpoint NodeName {{ }}
object Zone ZoneName {{ endpoints = [ NodeName ] }}
object FileLogger "main-log" {{ path = LogDir + "/icinga2.log"; severity = "notice" }}
object CheckerComponent "checker" {{ }}
object ApiListener "api" {{
  bind_host = "127.0.0.1"
  bind_port = {self.port}
  accept_config = false
  accept_commands = false
}}
object ApiUser "{API_USER}" {{ password = "{API_PASSWORD}"; permissions = [ "*" ] }}
object CheckCommand "true" {{ command = [ "/bin/true" ] }}
object Host "{HOST}" {{
  address = "127.0.0.1"
  check_command = "true"
  check_interval = 300s
}}
// the shipped files: commands, and the apply example (assigns nothing here: no host has vars.vllm)
{includes}
{services}
""")
        self.env = {**os.environ, "ICINGA2_USER": "root", "ICINGA2_GROUP": "root"}
        self.proc: subprocess.Popen | None = None
        self.client = httpx.Client(base_url=f"https://127.0.0.1:{self.port}", verify=False,
                                   auth=(API_USER, API_PASSWORD), headers={"Accept": "application/json"},
                                   timeout=10)
        self.results: list[dict] = []
        self._stream_stop = threading.Event()

    def argv(self, *extra: str) -> list[str]:
        return ["icinga2", "daemon", "-c", str(self.conf),
                *[f"-D{k}={v}" for k, v in self.dirs.items()], *extra]

    def validate(self) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv("-C"), capture_output=True, text=True, timeout=120, env=self.env)

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv(), stdout=open(self.stdout, "w"), stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        wait_for("the Icinga 2 REST API", self._api_up, 60, diag=lambda: tail(self.stdout) + "\n" + tail(self.log))
        threading.Thread(target=self._stream, daemon=True).start()

    def _api_up(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"icinga2 exited with {self.proc.returncode}:\n{tail(self.stdout)}", pytrace=False)
        try:
            return self.client.get("/v1/status/IcingaApplication").status_code == 200
        except httpx.HTTPError:
            return False

    def _stream(self) -> None:
        """Every CheckResult, in order, from the API event stream (so no transient result is missed)."""
        body = {"queue": "check_vllm-tests", "types": ["CheckResult"]}
        while not self._stream_stop.is_set():
            try:
                with self.client.stream("POST", "/v1/events", json=body, timeout=None) as resp:
                    for line in resp.iter_lines():
                        if line.strip():
                            self.results.append(self.result(json.loads(line)))
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)

    def result(self, ev: dict) -> dict:
        """What a test keeps of one CheckResult event (the incident's Icinga 2 keeps more)."""
        cr = ev.get("check_result", {})
        return {"service": ev.get("service"), "state": cr.get("state"), "output": cr.get("output", "")}

    def results_of(self, name: str) -> list[dict]:
        return [r for r in list(self.results) if r["service"] == name]

    def service(self, name: str) -> dict:
        resp = self.client.get(f"/v1/objects/services/{HOST}!{name}",
                               params={"attrs": ["state", "state_type", "check_attempt", "last_check_result",
                                                 "last_hard_state"]})
        resp.raise_for_status()
        return resp.json()["results"][0]["attrs"]

    def force_check(self, name: str) -> None:
        resp = self.client.post("/v1/actions/reschedule-check",
                                json={"type": "Service", "filter": f'service.name=="{name}"', "force": True})
        resp.raise_for_status()

    def stop(self) -> None:
        self._stream_stop.set()
        stop_group(self.proc)
        self.client.close()

    def diag(self) -> str:
        return f"--- icinga2.log\n{tail(self.log, 30)}\n--- stdout\n{tail(self.stdout, 10)}"


def schedule_downtime(daemon: Icinga2, name: str, seconds: float) -> float:
    """A fixed downtime of one service from now, through the API (as an operator's maintenance window)."""
    now = time.time()
    resp = daemon.client.post("/v1/actions/schedule-downtime", json={
        "type": "Service", "filter": f'service.name=="{name}"', "start_time": now, "end_time": now + seconds,
        "fixed": True, "author": "check_vllm tests", "comment": "maintenance window"})
    resp.raise_for_status()
    assert [r["code"] for r in resp.json()["results"]] == [200], resp.text
    return now + seconds
