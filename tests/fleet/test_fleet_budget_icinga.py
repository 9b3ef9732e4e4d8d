"""The fleet restart budget (issue 55, point 2) asked of a real Icinga 2 (Debian's 2.13) through its API: one master
on 127.0.0.1 with a PKI made by `icinga2 pki`, the shipped CheckCommand "vllm" running check_vllm against five
simulators, four services in servicegroup gpu-a and one in gpu-b. Three of gpu-a frozen, and gpu-b's; once the
master holds their HARD CRITICAL stuck, every frozen gpu-a server's handler is called at once (a storm) with
--fleet-icinga, an ApiUser allowed objects/query/Service only, and the master's CA: over the budget none restarts
and each says why; with a budget the three fit in, they all restart. gpu-b's is never counted. A wrong password
and a user without the permission are "not asked"."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.rig.monitoring import CONTRIB, FAST_CHECK, ensure_installed, icinga_value, plugin_dir, wait_for
from tests.rig.scripts import Result, run_script
from vllm_simulator import Simulator

from .conftest import TIMINGS
from .icinga_pki import API_PASSWORD, API_USER, Node, issue, make_ca

pytestmark = pytest.mark.fleet

GROUPS = ("gpu-a", "gpu-a", "gpu-a", "gpu-a", "gpu-b")
FROZEN = (0, 1, 2, 4)  # three of gpu-a's four, and gpu-b's one
FLEET_USER, FLEET_PASSWORD = "fleet-budget", "fleet-9c1e-secret"


def config(node: Node, plugins: Path, sims: list[Simulator], states: list[Path]) -> str:
    """The master's icinga2.conf: its API on 127.0.0.1, two ApiUsers besides the test's own, the shipped
    commands, one host per server and its check_vllm service in its group (no event command: the test calls
    the handlers, all at once, as one incident would)."""
    checks = "".join(f"""
object Host "gpu-{i}" {{
  address = "127.0.0.1"
  check_command = "true"
  check_interval = 300s
}}
object Service "vllm" {{
  host_name = "gpu-{i}"
  groups = [ "{group}" ]
  check_command = "vllm"
  check_interval = 2s
  retry_interval = 2s
  max_check_attempts = 2
  check_timeout = 20s
  vars.vllm_url = "{sim.url}"
  vars.vllm_state_dir = "{state}"
{chr(10).join(f"  vars.vllm_{k} = {icinga_value(v)}" for k, v in FAST_CHECK.items())}
}}
""" for i, (group, sim, state) in enumerate(zip(GROUPS, sims, states, strict=True)))
    return f"""
const PluginDir = "/usr/lib/nagios/plugins"
const PluginContribDir = "{plugins}"
const NodeName = "localhost"
const ZoneName = "master"
const TicketSalt = ""
include <itl>
include <plugins>
object Endpoint NodeName {{ }}
object Zone ZoneName {{ endpoints = [ NodeName ] }}
object FileLogger "main-log" {{ path = LogDir + "/icinga2.log"; severity = "notice" }}
object CheckerComponent "checker" {{ }}
object ApiListener "api" {{
  bind_host = "127.0.0.1"
  bind_port = {node.port}
  accept_config = false
  accept_commands = false
}}
object ApiUser "{API_USER}" {{ password = "{API_PASSWORD}"; permissions = [ "*" ] }}
object ApiUser "{FLEET_USER}" {{ password = "{FLEET_PASSWORD}"; permissions = [ "objects/query/Service" ] }}
object ApiUser "no-permission" {{ password = "{FLEET_PASSWORD}"; permissions = [ "status/query" ] }}
object CheckCommand "true" {{ command = [ "/bin/true" ] }}
include "{CONTRIB}/icinga2/vllm-commands.conf"
object ServiceGroup "gpu-a" {{ }}
object ServiceGroup "gpu-b" {{ }}
{checks}
"""


class Master:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = Node(root / "master", "localhost")
        self.sims = [Simulator(scenario="busy").start() for _ in GROUPS]
        self.states = [root / f"state-{i}" for i in range(len(GROUPS))]
        self.ca = make_ca(root / "ca")
        issue(self.ca, "localhost", self.node.dirs["DataDir"])  # SAN DNS:localhost, as the handler verifies it
        self.node.conf.write_text(config(self.node, plugin_dir(root), self.sims, self.states))
        self.url = f"https://localhost:{self.node.port}"  # loopback: the name its certificate carries

    def output(self, i: int) -> tuple[float, str]:
        attrs = self.node.object("services", f"gpu-{i}!vllm", ["state", "last_check_result"])
        return attrs["state"], (attrs["last_check_result"] or {}).get("output", "")

    def stuck(self, i: int) -> bool:
        """The master holds server i's check proving it stuck, at CRITICAL."""
        state, output = self.output(i)
        return state == 2 and output.startswith("VLLM CRITICAL - stuck")

    def user_file(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text)
        path.chmod(0o600)
        return path

    def handler(self, i: int, most: str, user_file: Path, *extra: str) -> Result:
        stamp = self.root / f"restarted-{i}"
        command = [sys.executable, "-c", f"open({str(stamp)!r}, 'a').write('x')"]
        out = run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--url",
                         self.sims[i].url, "--state-dir", str(self.states[i]), "--no-post-mortem",
                         "--fleet-icinga", self.url, "--fleet-icinga-user-file", str(user_file),
                         "--fleet-ca-file", str(self.ca.crt), "--fleet-group", "gpu-a", "--fleet-max", most,
                         *extra, "--", *command, installed=True)
        print(out.out.strip())
        assert FLEET_PASSWORD not in out.out + out.err
        return out

    def storm(self, most: str) -> list[Result]:
        """Every frozen gpu-a server's handler called at once, as one incident calls them all."""
        login = self.user_file("fleet-user", f"{FLEET_USER}:{FLEET_PASSWORD}\n")
        gpu_a = [i for i in FROZEN if GROUPS[i] == "gpu-a"]
        with ThreadPoolExecutor(len(gpu_a)) as pool:
            return list(pool.map(lambda i: self.handler(i, most, login), gpu_a))

    def stop(self) -> None:
        self.node.stop()
        for sim in self.sims:
            sim.stop()


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    ensure_installed()
    t0 = time.monotonic()
    m = Master(tmp_path_factory.mktemp("icinga2-fleet-budget"))
    try:
        m.node.validate()
        m.node.start()
        m.node.wait_api()
        for i in range(len(GROUPS)):
            wait_for(f"gpu-{i}'s check_vllm OK busy on the master", lambda i=i: m.output(i)[1].startswith(
                "VLLM OK - busy"), 60, diag=m.node.diag)
        TIMINGS["icinga2 fleet budget: five services busy"] = time.monotonic() - t0
        yield m
    finally:
        m.stop()


def test_a_storm_restarts_at_most_the_fleet_budget_the_master_counts(master):
    t0 = time.monotonic()
    for i in FROZEN:
        master.sims[i].set_scenario("stuck")
    for i in FROZEN:
        wait_for(f"gpu-{i} CRITICAL stuck on the master", lambda i=i: master.stuck(i), 90, diag=master.node.diag)
    TIMINGS["icinga2 fleet budget: four proven stuck"] = time.monotonic() - t0

    held = master.storm("2")
    for out in held:
        assert out.code == 0 and ": restart refused: verdict 'stuck'" in out.out, out.out + out.err
        assert f"fleet budget: 3 of 4 servers of servicegroup gpu-a in Icinga 2 at {master.url} are proven stuck " \
               "or starting (at most 2 at once): not restarting, a person decides" in out.out, out.out
    assert not list(master.root.glob("restarted-*"))

    done = master.storm("3")
    for out in done:
        assert out.code == 0 and ": restarted: verdict 'stuck'" in out.out, out.out + out.err
        assert f"fleet budget: 3 of 4 servers of servicegroup gpu-a in Icinga 2 at {master.url} are proven stuck " \
               "or starting (at most 3 at once)" in out.out, out.out
    assert sorted(p.name for p in master.root.glob("restarted-*")) == ["restarted-0", "restarted-1", "restarted-2"]
    assert all(p.read_text() == "x" for p in master.root.glob("restarted-*"))  # once each


@pytest.mark.parametrize(("who", "said"), [
    (f"{FLEET_USER}:wrong-password", "the Icinga 2 API refused the user (HTTP 401"),
    (f"no-permission:{FLEET_PASSWORD}", "does the ApiUser have the permission objects/query/Service?"),
])
def test_a_user_the_master_refuses_is_not_asked_and_holds_when_told_to(master, who, said):
    if not master.stuck(4):  # gpu-b's server: the storm's never restart it
        master.sims[4].set_scenario("stuck")
        wait_for("gpu-4 CRITICAL stuck on the master", lambda: master.stuck(4), 90, diag=master.node.diag)
    out = master.handler(4, "2", master.user_file("other-user", who + "\n"), "--fleet-unasked", "hold")
    assert out.code == 0 and ": restart refused: " in out.out, out.out + out.err
    assert "the fleet was not asked (" in out.out and said in out.out, out.out
    assert "holding (--fleet-unasked hold), a person decides" in out.out, out.out
    assert not (master.root / "restarted-4").exists()
