"""Icinga 2 distributed: a master schedules, an agent runs check_vllm and check_vllm_restart on its own host.

Two `icinga2 daemon` processes on 127.0.0.1, each with its own config, data, log, cache, spool and run
directories and its own API port; a PKI made here with `icinga2 pki new-ca` / `new-cert` / `sign-csr`. The
master's zones.conf, the agent's zones.conf and ApiListener, and the service apply rule are the shipped files
of contrib/icinga2/distributed/ (names, ports and intervals swapped for the test's); the shipped
contrib/icinga2/vllm-commands.conf goes into the master's zones.d/global-templates/ and reaches the agent by
the config sync, as an operator deploys it. Only the agent has check_vllm and check_vllm_restart in its
PluginContribDir: the master's is an empty directory, so a check or handler run on the master would fail.
Everything is read through the MASTER's REST API and from the agent's directories.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.rig.monitoring import (
    CONTRIB,
    FAST_CHECK,
    Simulator,
    count_lines,
    ensure_installed,
    icinga_value,
    plugin_dir,
    restart_command,
    wait_for,
)

from .common import localise
from .conftest import TIMINGS, Timer
from .icinga_pki import API_PASSWORD, API_USER, ENV, Node, issue, make_ca

pytestmark = pytest.mark.fleet

MASTER, AGENT = "icinga-master", "gpu-01"
DIST = CONTRIB / "icinga2" / "distributed"


def _common(plugins: Path, name: str, zone: str) -> str:
    return f"""
const PluginDir = "/usr/lib/nagios/plugins"
const PluginContribDir = "{plugins}"
const NodeName = "{name}"
const ZoneName = "{zone}"
const TicketSalt = ""
include <itl>
include <plugins>
include "zones.conf"
object FileLogger "main-log" {{ path = LogDir + "/icinga2.log"; severity = "notice" }}
"""


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.master = Node(root / "master", MASTER)
        self.agent = Node(root / "agent", AGENT)
        self.sim: Simulator | None = None
        self.counter = self.agent.root / "restarts.txt"
        self.handler_log = self.agent.root / "handler.log"
        self.state_dir = self.agent.root / "state"
        self.runs = self.agent.root / "runs.log"
        self.master_plugins = self.master.root / "plugins-none"
        self.master_plugins.mkdir()
        self.master_validated = self.agent_validated = ""

    def configure(self) -> None:
        ca = make_ca(self.root / "ca")
        issue(ca, MASTER, self.master.dirs["DataDir"])
        issue(ca, AGENT, self.agent.dirs["DataDir"])

        m = self.master
        (m.dirs["ConfigDir"] / "zones.conf").write_text((DIST / "zones.master.conf").read_text())
        m.conf.write_text(_common(self.master_plugins, MASTER, "master") + f"""
object CheckerComponent "checker" {{ }}
object ApiListener "api" {{
  bind_host = "127.0.0.1"
  bind_port = {m.port}
  accept_config = false
  accept_commands = false
}}
object ApiUser "{API_USER}" {{ password = "{API_PASSWORD}"; permissions = [ "*" ] }}
""")
        zones = m.dirs["ZonesDir"]
        (zones / "global-templates").mkdir()
        shutil.copy(CONTRIB / "icinga2" / "vllm-commands.conf", zones / "global-templates" / "vllm-commands.conf")
        (zones / "master").mkdir()
        (zones / "master" / "vllm-agent-services.conf").write_text(localise(
            (DIST / "vllm-agent-services.conf").read_text(),
            {"check_interval = 60s": "check_interval = 1s", "retry_interval = 30s": "retry_interval = 1s",
             "check_timeout = 60s": "check_timeout = 20s"}))
        host_vars = {"agent_endpoint": AGENT, "vllm": True, "vllm_port": int(self.sim.url.rsplit(":", 1)[1]),
                     "vllm_state_dir": str(self.state_dir),
                     "vllm_restart_command": restart_command(self.sim.url, self.counter, "revive"),
                     "vllm_restart_log": str(self.handler_log), "vllm_restart_cooldown": 20,
                     "vllm_restart_max_verdict_age": 30, **{f"vllm_{k}": v for k, v in FAST_CHECK.items()}}
        body = "\n".join(f"  vars.{k} = {icinga_value(v)}" for k, v in host_vars.items())
        (zones / "master" / "hosts.conf").write_text(f"""
object Host "{AGENT}" {{
  check_command = "cluster-zone"
  check_interval = 2s
  retry_interval = 1s
  address = "127.0.0.1"
{body}
}}
""")

        a = self.agent
        agent_plugins = plugin_dir(a.root)  # check_vllm (a shim noting each run in runs.log) + check_vllm_restart
        (a.dirs["ConfigDir"] / "zones.conf").write_text(localise(
            (DIST / "zones.agent.conf").read_text(),
            {'host = "icinga-master.example.org"': 'host = "127.0.0.1"', 'port = "5665"': f'port = "{m.port}"'}))
        (a.dirs["ConfigDir"] / "api.conf").write_text(localise(
            (DIST / "api.agent.conf").read_text(),
            {'bind_host = "0.0.0.0"': 'bind_host = "127.0.0.1"', "bind_port = 5665": f"bind_port = {a.port}"}))
        a.conf.write_text(_common(agent_plugins, AGENT, AGENT) + 'include "api.conf"\n')

    def service(self) -> dict:
        return self.master.object("services", f"{AGENT}!vllm", ["state", "state_type", "last_check_result",
                                                                 "last_hard_state", "check_attempt"])

    def results(self) -> list[dict]:
        """Every CheckResult of the vllm service the master processed, in order."""
        return [{"state": e["check_result"]["state"], "output": e["check_result"].get("output", ""),
                 "source": e["check_result"].get("check_source"), "hard": e["check_result"].get("vars_after", {})
                 .get("state_type") == 1}
                for e in list(self.master.events)
                if e.get("type") == "CheckResult" and e.get("host") == AGENT and e.get("service") == "vllm"]

    def agent_objects(self, kind: str, name: str | None = None) -> str:
        """`icinga2 object list` on the agent: the objects its running daemon compiled (synced ones included)."""
        argv = ["icinga2", "object", "list", "--type", kind, *(["--name", name] if name else []),
                f"-DCacheDir={self.agent.dirs['CacheDir']}"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ENV)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def assert_event_handler_ran_on_the_agent(self) -> None:
        """Each check_vllm_restart run (one line each in the handler log) is one the agent's Icinga executed."""
        executed = [ln for ln in self.agent.log.read_text().splitlines()
                    if "Executing event handler 'vllm-restart'" in ln]
        lines = self.handler_lines()
        assert executed and len(executed) == len(lines), (executed, lines)
        sent = self.master.log.read_text().count(f"Sending message 'event::ExecuteCommand' to '{AGENT}'")
        assert sent >= len(executed), sent

    def handler_lines(self) -> list[str]:
        return self.handler_log.read_text().splitlines() if self.handler_log.exists() else []

    def diag(self) -> str:
        return "\n".join([self.master.diag(), self.agent.diag(),
                          "--- handler log\n" + "\n".join(self.handler_lines()[-15:]),
                          "--- results\n" + "\n".join(f"{r}" for r in self.results()[-10:])])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    ensure_installed()
    t0 = time.monotonic()
    c = Cluster(tmp_path_factory.mktemp("icinga2-cluster"))
    try:
        c.sim = Simulator("busy", c.root / "sim.log")
        c.configure()
        c.master_validated = c.master.validate()
        c.agent_validated = c.agent.validate()
        c.master.start()
        c.master.wait_api()
        c.master.stream(["CheckResult", "StateChange"])
        c.agent.start()
        wait_for("the agent connected to the master", lambda: c.agent.alive() and c.master.object(
            "endpoints", AGENT, ["connected"])["connected"], 60, diag=c.diag)
        TIMINGS["icinga2 cluster connected"] = time.monotonic() - t0
        # Until the agent has validated the synced global zone and reloaded (~3 s), its answers are UNKNOWN
        # "Check command 'vllm' does not exist" and the master's event commands are dropped ("Event command
        # 'vllm-restart' does not exist" in the agent's log).
        wait_for("the first check_vllm result from the agent", lambda: any(
            r["source"] == AGENT and r["output"].startswith("VLLM ") for r in c.results()), 60, diag=c.diag)
        TIMINGS["icinga2 cluster synced"] = time.monotonic() - t0
        yield c
    finally:
        c.agent.stop()
        c.master.stop()
        if c.sim:
            c.sim.stop()


def test_the_shipped_zones_validate_and_the_master_holds_the_service(cluster):
    out = cluster.master_validated
    # the vllm service and its restart service (the handler's decision as a state), both run on the agent
    assert "Instantiated 2 Services." in out and "Instantiated 1 EventCommand." in out, out[-2000:]
    assert "Instantiated 3 Zones." in out and "Instantiated 2 Endpoints." in out, out[-2000:]
    assert "warning/" not in out and "critical/" not in out, out[-2000:]
    # before the sync the agent knows the zones and no event command: the commands come from the master
    agent = cluster.agent_validated
    assert "Instantiated 3 Zones." in agent and "Instantiated 2 Endpoints." in agent, agent[-2000:]
    assert "EventCommand" not in agent and "Service" not in agent, agent[-2000:]


def test_the_agent_accepts_config_and_commands_and_receives_the_commands_by_config_sync(cluster):
    api_conf = (cluster.agent.dirs["ConfigDir"] / "api.conf").read_text()
    assert "accept_config = true" in api_conf and "accept_commands = true" in api_conf
    synced = cluster.agent.dirs["DataDir"] / "api" / "zones" / "global-templates" / "_etc" / "vllm-commands.conf"
    wait_for("the config sync to deliver vllm-commands.conf to the agent", synced.exists, 60, diag=cluster.diag)
    assert synced.read_text() == (CONTRIB / "icinga2" / "vllm-commands.conf").read_text()
    # the objects the agent runs with, as it lists them itself: both accept flags on, the commands from the sync
    listener = cluster.agent_objects("ApiListener")
    assert re.search(r"^  \* accept_config = true$", listener, re.M), listener
    assert re.search(r"^  \* accept_commands = true$", listener, re.M), listener
    for kind, name in (("CheckCommand", "vllm"), ("EventCommand", "vllm-restart")):
        listing = cluster.agent_objects(kind, name)
        assert f"Object '{name}' of type '{kind}':" in listing, listing
        assert f"declared in '{synced}'" in listing.replace("//", "/"), listing[:600]


def test_a_busy_server_is_checked_on_the_agent_and_ok_busy_on_the_master(cluster):
    with Timer("icinga2 cluster: busy via agent"):
        wait_for("an OK busy result from the agent", lambda: any(
            r["source"] == AGENT and r["output"].startswith("VLLM OK - busy") for r in cluster.results()), 60,
            diag=cluster.diag)
    attrs = cluster.service()
    cr = attrs["last_check_result"]
    assert cr["check_source"] == AGENT, cr
    assert attrs["state"] == 0 and cr["output"].startswith("VLLM OK - busy"), cr
    results = cluster.results()
    assert all(r["source"] == AGENT for r in results), results
    # before the agent reloaded with the synced commands it could only answer UNKNOWN, and said why
    first = next(i for i, r in enumerate(results) if r["output"].startswith("VLLM "))
    assert all(r["state"] == 3 and r["output"] == "Check command 'vllm' does not exist." for r in results[:first]), \
        results[:first]
    assert count_lines(cluster.runs) >= 1  # the agent's PluginContribDir ran it ...
    assert list(cluster.master_plugins.iterdir()) == []  # ... the master has none to run
    assert cluster.sim.inference_requests() == []
    host = cluster.master.object("hosts", AGENT, ["state", "last_check_result"])
    assert host["state"] == 0, host  # cluster-zone: the agent's zone is connected
    wait_for("a result of the restart service from the agent", lambda: cluster.master.object(
        "services", f"{AGENT}!vllm-restart", ["last_check_result"])["last_check_result"], 60, diag=cluster.diag)
    restart = cluster.master.object("services", f"{AGENT}!vllm-restart", ["state", "last_check_result"])
    assert restart["last_check_result"]["check_source"] == AGENT, restart
    assert restart["last_check_result"]["output"].startswith("VLLM_RESTART OK - nothing to restart"), restart


def test_a_frozen_server_is_hard_critical_on_the_master_and_restarted_once_on_the_agent(cluster):
    wait_for("a first OK result", lambda: cluster.service()["state"] == 0, 60, diag=cluster.diag)
    before = len(cluster.results())
    with Timer("icinga2 cluster: stuck -> restart on agent -> OK"):
        cluster.sim.post("/_sim/scenario", {"scenario": "stuck"})
        wait_for("a HARD CRITICAL stuck result on the master", lambda: any(
            r["state"] == 2 and r["hard"] and r["output"].startswith("VLLM CRITICAL - stuck")
            for r in cluster.results()[before:]), 90, diag=cluster.diag)
        wait_for("the restart on the agent", lambda: count_lines(cluster.counter) >= 1, 60, diag=cluster.diag)
        wait_for("OK again after the restart", lambda: cluster.service()["state"] == 0, 60, diag=cluster.diag)
        time.sleep(4)  # keep checking: no second restart may follow
    after = cluster.results()[before:]
    words = [r["output"].split(" - ", 1)[1].split(":", 1)[0] for r in after if " - " in r["output"]]
    assert "stalling" in words and "stuck" in words, words
    assert words.index("stalling") < words.index("stuck"), words
    assert all(r["source"] == AGENT for r in after), after
    assert count_lines(cluster.counter) == 1, cluster.diag()
    lines = cluster.handler_lines()
    assert sum(": restarted: verdict 'stuck'" in ln for ln in lines) == 1, "\n".join(lines)
    assert any(" CRITICAL HARD " in ln for ln in lines), "\n".join(lines)
    cluster.assert_event_handler_ran_on_the_agent()
