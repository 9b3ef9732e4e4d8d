"""The fleet restart budget (issue 55, point 2) against a real Prometheus (Debian's 2.42): four simulators of group
gpu-a and one of gpu-b, each with the installed check_vllm_agent, scraped with the group as a target label; three of
gpu-a frozen, and gpu-b's. Each frozen server's own check proves it stuck; then every handler of the group is called
at once (a storm): over the budget none restarts and each says why; with a budget the group's stuck servers fit in,
they all restart. The other group's frozen server is never counted. On 127.0.0.1 only, scraped every second."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.rig.ports import free_port
from tests.rig.scripts import Result, run_check, run_script
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

from .server import agent, answered, logs, prometheus, query

pytestmark = pytest.mark.prometheus

GROUPS = ("gpu-a", "gpu-a", "gpu-a", "gpu-a", "gpu-b")
FROZEN = (0, 1, 2, 4)  # three of gpu-a's four, and gpu-b's one
JUDGE = ("--stuck-seconds", "2", "--stuck-readings", "2")


def scrape_config(ports: list[int]) -> str:
    targets = "".join(f"      - {{targets: ['127.0.0.1:{port}'], labels: {{group: {group}}}}}\n"
                      for port, group in zip(ports, GROUPS, strict=True))
    return ("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
            f"  - job_name: check_vllm_agent\n    static_configs:\n{targets}")


def proven_stuck(state: Path, sim: Simulator) -> bool:
    """The server's own check, run as the scheduler runs it, until its verdict is stuck at CRITICAL."""
    return run_check(state, "-u", sim.url, *JUDGE).first.startswith("VLLM CRITICAL - stuck")


def storm(tmp: Path, sims: list[Simulator], api: str, most: str) -> list[Result]:
    """Every frozen gpu-a server's handler called at once, as one incident calls them all."""
    def one(i: int) -> Result:
        stamp = tmp / f"restarted-{i}"
        command = [sys.executable, "-c", f"open({str(stamp)!r}, 'a').write('x')"]
        return run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--url", sims[i].url,
                          "--state-dir", str(tmp / f"state-{i}"), "--no-post-mortem", "--fleet-prometheus", api,
                          "--fleet-group", "gpu-a", "--fleet-max", most, "--", *command, installed=True)
    gpu_a = [i for i in FROZEN if GROUPS[i] == "gpu-a"]
    with ThreadPoolExecutor(len(gpu_a)) as pool:
        return list(pool.map(one, gpu_a))


def test_a_storm_restarts_at_most_the_fleet_budget(promtool, tmp_path):
    with ExitStack() as stack:
        sims = [Simulator(scenario="busy").start() for _ in GROUPS]
        for sim in sims:
            stack.callback(sim.stop)
        ports = [free_port() for _ in GROUPS]
        for i, (sim, port) in enumerate(zip(sims, ports, strict=True)):
            stack.enter_context(agent(tmp_path, f"agent-{i}", sim.url, port, *JUDGE))
        api = stack.enter_context(prometheus(tmp_path, scrape_config(ports)))
        diag = lambda: logs(tmp_path)  # noqa: E731
        wait_for("Prometheus to hold gpu-a's four agents", lambda: [
            r for r in answered(api, 'count(check_vllm_agent_up{group="gpu-a"} == 1)') if r["value"][1] == "4"], 60,
                 0.5, diag)
        for i in FROZEN:
            sims[i].set_scenario("stuck")
        wait_for("Prometheus to hold three of gpu-a proven stuck", lambda: [
            r for r in answered(api, 'count(check_vllm_restartable{group="gpu-a"} == 1)') if r["value"][1] == "3"], 90,
                 0.5, diag)
        assert query(api, 'count(check_vllm_restartable == 1)')[0]["value"][1] == "4"  # gpu-b's is stuck too
        for i in FROZEN:
            wait_for(f"server {i}'s own check to prove it stuck", lambda i=i: proven_stuck(tmp_path / f"state-{i}",
                                                                                           sims[i]), 60, 0.5)

        held = storm(tmp_path, sims, api, "2")
        for out in held:
            assert out.code == 0 and ": restart refused: verdict 'stuck'" in out.out, out.out + out.err
            assert "fleet budget: 3 of 4 servers of group gpu-a are proven stuck or starting (at most 2 at once): " \
                   "not restarting, a person decides" in out.out, out.out
        assert not list(tmp_path.glob("restarted-*"))
        assert all("(at most 2 at once, 50% of 4): not restarting" in out.out
                   for out in storm(tmp_path, sims, api, "50%"))
        assert not list(tmp_path.glob("restarted-*"))

        done = storm(tmp_path, sims, api, "3")
        for out in done:
            assert out.code == 0 and ": restarted: verdict 'stuck'" in out.out, out.out + out.err
            assert "fleet budget: 3 of 4 servers of group gpu-a are proven stuck or starting (at most 3 at once)" \
                   in out.out, out.out
        assert sorted(p.name for p in tmp_path.glob("restarted-*")) == ["restarted-0", "restarted-1", "restarted-2"]
        assert all(p.read_text() == "x" for p in tmp_path.glob("restarted-*"))  # once each
