"""Shared pieces of the monitoring tier: installing the daemons, simulators, the plugin directory.

Policy: nothing here skips. A missing package, a config that does not validate or a daemon that
does not start FAILS the tier with the reason and the log tail.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CONTRIB = REPO / "contrib"
#: Seconds after a restart during which the check reads down as "starting" (test value; 900 in production).
START_GRACE = 4.0

#: Options that make the check fast enough for a test loop of 1 s intervals.
FAST_CHECK = {"min_gap": "0.5", "stuck_readings": "2", "stuck_seconds": "2", "reread_delay": "0.5",
              "probe_timeout": "2", "timeout": "10"}


def ensure_installed() -> None:
    script = REPO / ".ci" / "monitoring-deps.sh"
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        pytest.fail(f"{script} failed (exit {out.returncode}); Icinga 2 / Nagios 4 are needed for this tier:\n"
                    f"{out.stdout[-2000:]}{out.stderr[-3000:]}", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"({path}: {err.strerror})"


def icinga_value(value) -> str:
    """A Python value as Icinga 2 DSL (arrays, booleans, numbers, strings)."""
    if isinstance(value, list):
        return "[ " + ", ".join(icinga_value(v) for v in value) + " ]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def wait_for(what: str, predicate, timeout: float, interval: float = 0.25, diag=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}\n{diag()}", pytrace=False)
        time.sleep(interval)


class Simulator:
    """The vLLM simulator as a separate process on 127.0.0.1, started and stopped by the test."""

    def __init__(self, scenario: str, log: Path) -> None:
        self.log = log
        self.fh = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "vllm_simulator", "--host", "127.0.0.1", "--port", "0",
             "--scenario", scenario], stdout=subprocess.PIPE, stderr=self.fh, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.stop()
            pytest.fail(f"simulator did not start: {line!r}\n{tail(log)}", pytrace=False)
        self.url = line.split("listening on ", 1)[1].split()[0]

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def inference_requests(self) -> list[dict]:
        with urllib.request.urlopen(self.url + "/_sim/requests", timeout=5) as resp:
            log = json.loads(resp.read())
        return [r for r in log if r["method"] == "POST" and r["path"].startswith("/v1/")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.fh.close()


def plugin_dir(root: Path) -> Path:
    """A PluginContribDir / $USER1$ holding check_vllm and check_vllm_restart, as an operator installs them.

    check_vllm is the real CLI behind a two-line shim that (a) shortens the start-up grace after a
    restart from 900 s to START_GRACE with --start-grace and (b) notes each run in runs.log so the
    tests can count checks without running the check themselves.
    """
    d = root / "plugins"
    d.mkdir()
    shim = d / "check_vllm"
    shim.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        f"with open({str(root / 'runs.log')!r}, 'a') as fh:\n"
        "    fh.write(f'{time.time():.3f} ' + ' '.join(sys.argv[1:]) + '\\n')\n"
        "from check_vllm.nagios.cli import main\n"
        f"main([*sys.argv[1:], '--start-grace', '{START_GRACE:g}'])\n")
    shim.chmod(0o755)
    handler = shutil.which("check_vllm_restart")
    if handler is None:
        pytest.fail("check_vllm_restart is not on PATH: pip install -e . first", pytrace=False)
    (d / "check_vllm_restart").symlink_to(handler)
    return d


def count_lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


def restart_command(url: str, counter: Path, mode: str) -> list[str]:
    return [sys.executable, str(HERE / "restart_sim.py"), url, str(counter), mode]


def serve(daemon, scenarios: dict, root: Path, what: str, t0: float, timings: dict):
    """Validate the daemon's config (fail loudly with its output), start it, yield it, stop it and the simulators.

    `daemon` is an Icinga2 or Nagios4 of the tier: validate() -> CompletedProcess, start(), stop().
    """
    daemon.scenarios = scenarios
    daemon.runs = root / "runs.log"
    try:
        checked = daemon.validate()
        if checked.returncode != 0:
            pytest.fail(f"{what} rejected the config:\n{checked.stdout[-4000:]}", pytrace=False)
        daemon.validated = checked.stdout
        daemon.start()
        timings[f"{what.split()[0]} start"] = time.monotonic() - t0
        yield daemon
    finally:
        daemon.stop()
        for s in scenarios.values():
            if s.sim:
                s.sim.stop()
