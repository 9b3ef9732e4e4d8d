"""Shared pieces of the monitoring tier: installing the daemons, simulators, the plugin directory.

Policy: nothing here skips. A missing package, a config that does not validate or a daemon that
does not start FAILS the tier with the reason and the log tail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.package import layout
from tests.rig.ports import free_port  # noqa: F401  (re-exported: one owner, tests/rig)
from tests.rig.scripts import script
from tests.rig.waiting import wait_for  # noqa: F401  (re-exported)

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


def stop_group(proc: subprocess.Popen | None, grace: float = 15) -> None:
    """Stop a daemon started in its own process group (its check and handler children with it): TERM, then
    KILL after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def plugin_dir(root: Path) -> Path:
    """A PluginContribDir / $USER1$ holding check_vllm and check_vllm_restart, as an operator installs them.

    check_vllm is the real CLI behind a two-line shim that (a) shortens the start-up grace after a
    restart from 900 s to START_GRACE with --start-grace and (b) notes each run in runs.log so the
    tests can count checks without running the check themselves.
    With CHECK_VLLM_INSTALLED=deb the shim execs the .deb's /usr/lib/nagios/plugins/check_vllm (system
    python3, Debian's libraries) and the handler is the .deb's.
    """
    d = root / "plugins"
    d.mkdir()
    shim = d / "check_vllm"
    note = (f"with open({str(root / 'runs.log')!r}, 'a') as fh:\n"
            "    fh.write(f'{time.time():.3f} ' + ' '.join(sys.argv[1:]) + '\\n')\n")
    grace = f"'--start-grace', '{START_GRACE:g}'"
    if layout.deb():
        shim.write_text(f"#!{layout.SYSTEM_PYTHON}\nimport os, sys, time\n{note}"
                        f"os.execv({str(layout.CHECK)!r}, [{str(layout.CHECK)!r}, *sys.argv[1:], {grace}])\n")
    else:
        shim.write_text(f"#!{sys.executable}\nimport sys, time\n{note}"
                        f"from check_vllm.nagios.cli import main\nmain([*sys.argv[1:], {grace}])\n")
    shim.chmod(0o755)
    handler = str(layout.HANDLER) if layout.deb() else script("check_vllm_restart")
    (d / "check_vllm_restart").symlink_to(handler)
    return d


def shipped(name: str) -> Path:
    """A definition file as shipped: the checkout's contrib/, or with CHECK_VLLM_INSTALLED=deb the .deb's examples."""
    return (layout.EXAMPLES if layout.deb() else CONTRIB) / name


def restarted_once_by_the_restart_service(counter: Path, lines, status, diag, main_handler_late=None) -> list[str]:
    """The masked-stuck case, the same under Icinga 2 and Nagios 4: wait for the restart, give a second one
    time to follow (it must not: cooldown 30 s), and check that the restart service's call made it, on
    `stuck`, after its status said due. `lines`/`status`: the handler log and the restart service's outputs.
    `main_handler_late`: whether the main service's own handler call (made at its state change, before the
    proof) ran so late on a loaded machine that it found the proof itself (Nagios 4 ran it 6 s late once):
    then that call made the one restart, rightly, and the restart service had nothing left to do."""
    wait_for("the restart through the restart service", lambda: count_lines(counter) >= 1, 120, diag=diag)
    time.sleep(4)
    assert count_lines(counter) == 1, lines()
    restarted = [ln for ln in lines() if ": restarted: verdict 'stuck'" in ln]
    assert len(restarted) == 1 and " CRITICAL HARD attempt 1:" in restarted[0], "\n".join(lines())
    said = status()
    due = any(o.startswith("VLLM_RESTART CRITICAL - due: verdict 'stuck'") for o in said)
    assert due or (main_handler_late is not None and main_handler_late()), (said, lines())
    return said


def after_the_stuck(words: list[str]) -> list[str]:
    """The verdict words after a frozen server's first `stuck`, without the `stuck` ones (it reads stuck until
    the restart stops it) and without one UNKNOWN `protocol`: a check that connects as the old listener
    closes is reset before any answer (never restartable; CI saw it once). It may not repeat: the next run
    sees the new process."""
    after = words[words.index("stuck"):]
    assert after.count("protocol") <= 1, words
    return [w for w in after if w not in ("stuck", "protocol")]


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
