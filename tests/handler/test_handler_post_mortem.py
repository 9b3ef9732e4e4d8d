"""check_vllm_restart takes a post-mortem once it has decided to restart, before the command (issue 48): the
installed handler, the simulator's /metrics, a real Python process named by --pid-file as the server (py-spy dumps
it), a real restart command. Off with --no-post-mortem; never on a path that does not restart; a dumper that never
returns costs the restart at most its budget; --post-mortems lists what is kept."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.memory.statefile import check_file
from check_vllm.restart.post_mortem import BUDGET
from tests.rig.scripts import Result, run_script
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

#: The "server": a Python process whose main thread spins in a function the dump must name, with a child.
HUNG = """
import socket, subprocess, sys, time
held = socket.socket()
held.bind(("127.0.0.1", 0))
held.listen()
child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)"])
open(sys.argv[1], "w").write(f"{held.getsockname()[1]}\\n")
def engine_core_busy_loop():
    while True:
        time.sleep(0.05)
engine_core_busy_loop()
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Simulator, Path]]:
    """The simulator (its URL and /metrics) and a pid file naming the hung Python process as its server."""
    sim = Simulator(scenario="busy").start()
    port_file = tmp_path / "server.port"
    proc = subprocess.Popen([sys.executable, "-c", HUNG, str(port_file)], start_new_session=True)
    pid_file = tmp_path / "server.pid"
    pid_file.write_text(f"{proc.pid}\n")
    # the port is written once its child started
    wait_for("the hung server's port", lambda: port_file.exists() and port_file.read_text().endswith("\n"), 60,
             interval=0.05)
    try:
        yield sim, pid_file
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
        sim.stop()


def named(pid_file: Path) -> list[str]:
    """The options naming the hung process: its pid file, and the port it holds (the proof that it is the server:
    the simulator holds the URL's, like a proxy in front of it)."""
    return ["--pid-file", str(pid_file), "--server-port", (pid_file.parent / "server.port").read_text().strip()]


def plant_stuck(state: Path, url: str, ago: float = 1.0) -> None:
    state.mkdir(exist_ok=True, mode=0o700)
    check_file(state, url, proxy=False).save(
        {"verdict": {"word": "stuck", "state": 2, "text": "no progress over 2 readings", "at": time.time() - ago,
                     "engines": {}}})


def restart(tmp: Path, url: str, *extra: str, env: dict[str, str] | None = None) -> Result:
    stamp = tmp / "restarted-at"
    command = [sys.executable, "-c", f"import time; open({str(stamp)!r}, 'w').write(repr(time.time()))"]
    return run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3",
                      "--url", url, "--state-dir", str(tmp / "state"), *extra, "--", *command,
                      env={**os.environ, **(env or {})})


def bundle_of(out: Result) -> Path:
    line = out.out.strip()
    assert "post-mortem in " in line, line
    return Path(line.split("post-mortem in ", 1)[1].split(" (", 1)[0])


def test_a_restart_is_preceded_by_a_post_mortem_of_the_hang(server, tmp_path):
    sim, pid_file = server
    plant_stuck(tmp_path / "state", sim.url)
    began = time.time()
    out = restart(tmp_path, sim.url, *named(pid_file))
    assert out.code == 0 and ": restarted: verdict 'stuck'" in out.out, out.out + out.err
    bundle = bundle_of(out)
    door_file = check_file(tmp_path / "state", sim.url, proxy=False).path
    assert bundle.parent == tmp_path / "state" / "post-mortems" / door_file.stem  # this server's own directory
    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    files = {p.name for p in bundle.iterdir()}
    assert {"evidence.json", "metrics.txt", "README.txt", "collection.json", "tree.txt"} <= files, files

    proof = json.loads((bundle / "evidence.json").read_text())
    assert proof["verdict"]["word"] == "stuck" and proof["state_file"]["verdict"]["word"] == "stuck"
    assert "verdict 'stuck'" in proof["decision"] and proof["event"]["state_type"] == "HARD"
    page = (bundle / "metrics.txt").read_text()
    assert page.startswith("HTTP 200") and "vllm:num_requests_running" in page
    pid = int(pid_file.read_text())
    dump = (bundle / f"py-spy-{pid}.txt").read_text()
    assert "engine_core_busy_loop" in dump, dump
    tree = (bundle / "tree.txt").read_text()
    assert str(pid) in tree and len([ln for ln in tree.splitlines() if ln.strip()]) >= 2, tree  # and its child

    # the restart came after the collection, and within the budget of the decision
    collected = json.loads((bundle / "collection.json").read_text())
    restarted_at = float((tmp_path / "restarted-at").read_text())
    # an order, not a speed: the collection ended before the restart began (0.5 s: two processes' wall clocks);
    # its 'took' within the product's own figure x5, the default --post-mortem-budget (post_mortem.BUDGET, 20 s)
    assert began + collected["took"] <= restarted_at + 0.5 and collected["took"] < 5 * BUDGET, collected

    listed = run_script("check_vllm_restart", "--post-mortems", "--url", sim.url, "--state-dir",
                        str(tmp_path / "state"))
    assert listed.code == 0 and listed.out.startswith(str(bundle) + "  "), listed.out
    assert "stuck" in listed.out, listed.out


def test_no_post_mortem_when_asked_and_none_on_a_path_that_does_not_restart(server, tmp_path):
    sim, pid_file = server
    plant_stuck(tmp_path / "state", sim.url)
    dry = restart(tmp_path, sim.url, *named(pid_file), "--dry-run")
    assert "would restart (--dry-run)" in dry.out and "post-mortem" not in dry.out, dry.out
    off = restart(tmp_path, sim.url, *named(pid_file), "--no-post-mortem")
    assert ": restarted:" in off.out and off.out.strip().endswith("; no post-mortem (--no-post-mortem)"), off.out
    refused = restart(tmp_path, sim.url, *named(pid_file))  # the same verdict, after its restart
    assert ": no restart:" in refused.out and "post-mortem" not in refused.out, refused.out
    assert not (tmp_path / "state" / "post-mortems").exists()


def test_a_dumper_that_never_returns_delays_the_restart_by_at_most_the_budget(server, tmp_path):
    """py-spy and gdb that hang (as they can on a process in the D state): the restart follows the budget."""
    sim, pid_file = server
    plant_stuck(tmp_path / "state", sim.url)
    tools = tmp_path / "hanging-tools"
    tools.mkdir()
    for name in ("py-spy", "gdb"):
        (tools / name).write_text("#!/bin/sh\nexec sleep 3600\n")
        (tools / name).chmod(0o755)
    began = time.monotonic()
    out = restart(tmp_path, sim.url, *named(pid_file), "--post-mortem-budget", "4",
                  env={"PATH": f"{tools}:{os.environ['PATH']}"})
    took = time.monotonic() - began
    assert out.code == 0 and ": restarted:" in out.out, out.out + out.err
    # the bound is the product's own figure: --post-mortem-budget 4, x5; the dumpers alone would hang for 3600 s
    assert took < 5 * 4, took
    bundle = bundle_of(out)
    steps = dict((s["step"], s["outcome"]) for s in json.loads((bundle / "collection.json").read_text())["steps"])
    assert any("timed out" in outcome or "skipped" in outcome for step, outcome in steps.items()
               if step.startswith("py-spy")), steps
    assert subprocess.run(["pgrep", "-f", "sleep 3600"], capture_output=True).stdout == b"", "a dumper outlived it"


def test_take_post_mortem_collects_only_a_proven_hang(server, tmp_path):
    """A preStop hook runs on every stop: a rollout or a busy server's stop collects nothing; a stuck one does."""
    sim, pid_file = server
    state = tmp_path / "state"
    take = ("check_vllm_restart", "--take-post-mortem", "--url", sim.url, "--state-dir", str(state), *named(pid_file))
    state.mkdir(mode=0o700)
    check_file(state, sim.url, proxy=False).save(
        {"verdict": {"word": "busy", "state": 0, "text": "3 running", "at": time.time() - 1, "engines": {}}})
    busy = run_script(*take)
    assert busy.code == 0 and "no post-mortem: the check's last verdict is 'busy', not one of stuck/down/" \
        "unresponsive, not a proven hang" in busy.out, busy.out
    plant_stuck(state, sim.url)
    stuck = run_script(*take)
    assert stuck.code == 0 and ": post-mortem: post-mortem in " in stuck.out, stuck.out + stuck.err
    bundle = bundle_of(stuck)
    assert "--take-post-mortem: verdict 'stuck'" in json.loads((bundle / "evidence.json").read_text())["decision"]
    # and the restart service's line names it
    status = run_script("check_vllm_restart", "--status", "--url", sim.url, "--state-dir", str(state))
    assert f"; last post-mortem {bundle}, " in status.out, status.out


def test_take_post_mortem_asks_the_restarts_own_gate(server, tmp_path):
    """--take-post-mortem and the restart decide "a fresh proven hang" by one gate (policy.proven_hang), in its
    words: with --proxy the proxy's CRITICAL is one (a second gate refused it, though the handler restarts on it);
    a verdict dated in the future is none, said as the restart says it (it was '-3600 s old')."""
    sim, pid_file = server
    state = tmp_path / "state"
    take = ("check_vllm_restart", "--take-post-mortem", "--url", sim.url, "--state-dir", str(state), *named(pid_file))
    plant_stuck(state, sim.url, ago=-3600.0)
    future = run_script(*take)
    assert future.code == 0 and "no post-mortem: the check's verdict 'stuck' is dated 3600 s in the future" \
        in future.out, future.out
    check_file(state, sim.url, proxy=True).save(
        {"verdict": {"word": "proxy", "state": 2, "text": "proxy: /v1/models timed out", "at": time.time() - 1,
                     "engines": {}}})
    proxied = run_script(*take, "--proxy")
    assert proxied.code == 0 and ": post-mortem: post-mortem in " in proxied.out, proxied.out + proxied.err


def test_a_bad_key_file_costs_the_page_not_the_post_mortem_nor_the_restart(server, tmp_path):
    """The connection is made only when the page is read, in the collection: an empty key file is that step's
    outcome; the rest is taken and the restart runs."""
    sim, pid_file = server
    plant_stuck(tmp_path / "state", sim.url)
    key = tmp_path / "key"
    key.write_text("\n")
    out = restart(tmp_path, sim.url, *named(pid_file), "--api-key-file", str(key))
    assert out.code == 0 and ": restarted:" in out.out, out.out + out.err
    steps = dict((s["step"], s["outcome"]) for s in json.loads((bundle_of(out) / "collection.json").read_text())["steps"])
    assert steps["metrics"].startswith("failed: UsageError: ") and "is empty" in steps["metrics"], steps


def test_a_stale_pid_file_naming_another_program_dumps_nothing_and_restarts(server, tmp_path):
    """A pid file left behind whose pid was reused by a program that is not the server (it holds none of its
    ports): nothing is dumped, the bundle says why, and the restart runs."""
    sim, pid_file = server
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / "stale.pid"
        stale.write_text(f"{other.pid}\n")
        plant_stuck(tmp_path / "state", sim.url)
        out = restart(tmp_path, sim.url, "--pid-file", str(stale))
        assert out.code == 0 and ": restarted:" in out.out, out.out + out.err
        bundle = bundle_of(out)
        steps = dict((s["step"], s["outcome"]) for s in json.loads((bundle / "collection.json").read_text())["steps"])
        port = sim.url.rsplit(":", 1)[1]
        assert steps["processes"] == (f"none dumped: process {other.pid} named by --pid-file holds no listening "
                                      f"socket on port {port}, nor does a child of it: not dumped (a stale pid file "
                                      "whose pid was reused, or another program)"), steps
        assert not [f for f in bundle.iterdir() if f.name.startswith(("py-spy", "gdb", "proc-"))]
    finally:
        other.kill()
        other.wait()


def test_two_servers_on_one_state_directory_keep_list_and_name_their_own_bundles(server, tmp_path):
    """A host with a server per GPU and one state directory: a neighbour's restarts never prune this server's
    bundle, and --post-mortems and --status name only this server's."""
    sim, pid_file = server
    neighbour = Simulator(scenario="busy").start()
    try:
        plant_stuck(tmp_path / "state", sim.url)
        mine = bundle_of(restart(tmp_path, sim.url, *named(pid_file)))
        theirs = []
        for _ in range(3):
            plant_stuck(tmp_path / "state", neighbour.url, ago=0.0)  # newer than its last restart
            out = restart(tmp_path, neighbour.url, "--post-mortem-keep", "1", "--max-per-hour", "10",
                          "--cooldown", "0")
            theirs.append(bundle_of(out))
        assert mine.is_dir() and theirs[-1].is_dir() and not theirs[0].exists(), (mine, theirs)
        assert mine.parent != theirs[-1].parent
        state = ("--state-dir", str(tmp_path / "state"))
        listed = run_script("check_vllm_restart", "--post-mortems", "--url", sim.url, *state).out
        assert str(mine) in listed and not any(str(b) in listed for b in theirs), listed
        status = run_script("check_vllm_restart", "--status", "--url", sim.url, *state).out
        assert f"; last post-mortem {mine}, " in status, status
    finally:
        neighbour.stop()
