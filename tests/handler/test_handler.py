"""check_vllm_restart: the decision table (pure) and the handler against real state files and processes.

These run in the default tier (no marker): they need no Icinga or Nagios, only the check and the handler.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from check_vllm.machine import clock
from check_vllm.memory.codec import remembered
from check_vllm.memory.marker import marker_path, read_marker
from check_vllm.memory.statefile import StateFile, check_file, state_path
from check_vllm.memory.target import legacy_key, target_key
from check_vllm.restart.history import history_path
from check_vllm.restart.policy import Event, Policy, decide
from tests.rig.scripts import Result, run_check, run_script, script

NOW = 1_800_000_000.0
URL = "http://127.0.0.1:1"  # nothing listens on port 1: the real check says "down"
CRIT_HARD = Event("CRITICAL", "HARD", 3)
POLICY = Policy(cooldown=900, max_per_hour=3, max_verdict_age=600)


def verdict(word="stuck", state=2, age=10.0, text="no progress"):
    return {"word": word, "state": state, "at": NOW - age, "text": text, "engines": {}}


@pytest.mark.parametrize(
    "event, v, restarts, policy, act, why",
    [
        (CRIT_HARD, verdict(), [], POLICY, True, "verdict 'stuck'"),
        (CRIT_HARD, verdict("down"), [], POLICY, True, "verdict 'down'"),
        (CRIT_HARD, verdict("unresponsive"), [], POLICY, True, "verdict 'unresponsive'"),
        (Event("WARNING", "HARD", 3), verdict(), [], POLICY, False, "WARNING, not CRITICAL"),
        (Event("OK", "HARD", 1), verdict(), [], POLICY, False, "OK, not CRITICAL"),
        (Event("UNKNOWN", "HARD", 3), verdict(), [], POLICY, False, "UNKNOWN, not CRITICAL"),
        (Event("CRITICAL", "SOFT", 2), verdict(), [], POLICY, False, "SOFT (attempt 2)"),
        (CRIT_HARD, None, [], POLICY, False, "no verdict"),
        (CRIT_HARD, verdict("busy", 0), [], POLICY, False, "'busy', not one of"),
        (CRIT_HARD, verdict("stalling", 1), [], POLICY, False, "'stalling', not one of"),
        (CRIT_HARD, verdict("starting", 1), [], POLICY, False, "'starting', not one of"),
        (CRIT_HARD, verdict("no metrics", 2), [], POLICY, False, "'no metrics', not one of"),
        (CRIT_HARD, verdict("proxy", 2), [], POLICY, False, "'proxy', not one of"),
        (CRIT_HARD, verdict("proxy", 2), [], Policy(proxy=True), True, "verdict 'proxy'"),
        (CRIT_HARD, verdict("unresponsive", 1), [], POLICY, False, "not CRITICAL yet"),
        (CRIT_HARD, verdict(age=601), [], POLICY, False, "601 s old"),
        (CRIT_HARD, verdict(age=-60), [], POLICY, False, "in the future"),
        (CRIT_HARD, {**verdict(), "at": "soon"}, [], POLICY, False, "no valid time"),
        (CRIT_HARD, verdict(age=10), [NOW - 5], Policy(cooldown=0), False, "before the last restart"),
        (CRIT_HARD, verdict(age=10), [NOW - 300], POLICY, False, "cooldown 900"),
        (CRIT_HARD, verdict(age=10), [NOW - 960], POLICY, True, "verdict 'stuck'"),
        (CRIT_HARD, verdict(age=1), [NOW - 1000, NOW - 2000, NOW - 3000], POLICY, False, "circuit breaker open: 3"),
        (CRIT_HARD, verdict(age=1), [NOW - 1000, NOW - 2000, NOW - 3700], POLICY, True, "verdict 'stuck'"),
        (CRIT_HARD, verdict(age=1), [NOW - 100], Policy(cooldown=10, max_per_hour=1), False, "circuit breaker"),
    ],
)
def test_decision_table(event, v, restarts, policy, act, why):
    d = decide(event, remembered(v), None, restarts, policy, NOW)  # as the handler reads it from the file
    assert d.act is act, d.why
    assert why in d.why
    assert (d.kind == "restart") is act, d.kind  # a restart, and only a restart, is kind "restart"


def test_refusals_by_a_guard_are_marked_as_such():
    assert decide(CRIT_HARD, remembered(verdict()), None, [NOW - 30], POLICY, NOW).kind == "refuse"
    assert decide(Event("OK", "HARD"), remembered(verdict()), None, [], POLICY, NOW).kind == "skip"


# --------------------------------------------------------------------------- real files, real processes


def handler(tmp: Path, *extra: str, state="CRITICAL", state_type="HARD", url=URL, command=None) -> Result:
    counter = tmp / "restarts.txt"
    command = command or [sys.executable, "-c",
                          f"open({str(counter)!r}, 'a').write('restart\\n'); print('restarting vllm')"]
    return run_script("check_vllm_restart", "--state", state, "--state-type", state_type, "--attempt", "3",
                      "--url", url, "--state-dir", str(tmp / "state"), *extra, "--", *command)


def restarts(tmp: Path) -> int:
    f = tmp / "restarts.txt"
    return len(f.read_text().splitlines()) if f.exists() else 0


def real_down_verdict(tmp: Path, url: str = URL) -> Result:
    out = run_check(tmp / "state", "-u", url)
    assert out.code == 2 and "down" in out.out, out.out + out.err
    return out


def plant_verdict(tmp: Path, word: str, state: int, age: float = 1.0, url: str = URL) -> None:
    d = tmp / "state"
    d.mkdir(exist_ok=True, mode=0o700)
    check_file(d, url, proxy=False).save(
        {"verdict": {"word": word, "state": state, "text": "planted", "at": time.time() - age, "engines": {}}})


def test_restarts_once_on_a_real_down_verdict_and_writes_the_marker(tmp_path):
    real_down_verdict(tmp_path)
    before = time.time()
    out = handler(tmp_path, "--log", str(tmp_path / "handler.log"))
    after = time.time()
    assert out.code == 0, out.out + out.err
    assert restarts(tmp_path) == 1
    [line] = out.out.splitlines()
    assert ": restarted: verdict 'down'" in line and "restart 1 of at most 3 this hour" in line
    assert (tmp_path / "handler.log").read_text().strip() == line

    marker = marker_path(tmp_path / "state", URL)
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    at = read_marker(marker, clock.now())
    assert at is not None and before <= at.wall <= after and at.boot == clock.boot_id()  # dated by this restart
    hist = json.loads(history_path(tmp_path / "state", URL).read_text())["data"]["restarts"]
    assert [(h["verdict"], h["rc"]) for h in hist] == [("down", 0)]

    # The check now reads the marker: starting (WARNING), and the handler leaves it alone.
    after = run_check(tmp_path / "state", "-u", URL)
    assert after.code == 1 and "starting" in after.out, after.out
    again = handler(tmp_path)
    assert again.code == 0 and restarts(tmp_path) == 1
    assert "no restart: the check's last verdict is 'starting'" in again.out


def test_a_verdict_older_than_the_last_restart_never_restarts_again(tmp_path):
    real_down_verdict(tmp_path)
    assert handler(tmp_path, "--cooldown", "0").code == 0
    second = handler(tmp_path, "--cooldown", "0")
    assert restarts(tmp_path) == 1
    assert "before the last restart" in second.out


def test_cooldown_then_circuit_breaker(tmp_path):
    for n in range(1, 4):
        plant_verdict(tmp_path, "stuck", 2, age=0.0)
        out = handler(tmp_path, "--cooldown", "0.5", "--max-per-hour", "2")
        if n <= 2:
            assert restarts(tmp_path) == n, out.out
            assert f"restart {n} of at most 2 this hour" in out.out, out.out
            time.sleep(0.05)
            plant_verdict(tmp_path, "stuck", 2, age=0.0)  # a newer verdict, so only the cooldown says no
            early = handler(tmp_path, "--cooldown", "60", "--max-per-hour", "2")
            assert "restart refused" in early.out and "cooldown 60" in early.out
        else:
            assert restarts(tmp_path) == 2
            assert "restart refused" in out.out and "circuit breaker open: 2 restarts" in out.out
        time.sleep(0.6)


def test_a_wall_clock_step_forward_lets_no_cooldown_pass_early(tmp_path):
    """The wall clock jumps two hours ahead right after a restart (NTP after a boot, a VM resumed): the
    cooldown counts on the boot-time clock the entry carries, so the next stuck is still refused."""
    plant_verdict(tmp_path, "stuck", 2, age=0.0)
    assert handler(tmp_path, "--cooldown", "0").code == 0 and restarts(tmp_path) == 1
    path = history_path(tmp_path / "state", URL)
    doc = json.loads(path.read_text())
    [e] = doc["data"]["restarts"]
    assert e["boot"] == clock.boot_id() and e["mono"] <= clock.now().mono, e
    e["at"], e["done"] = e["at"] - 7200, e["done"] - 7200  # as seen after the step: two hours ago
    path.write_text(json.dumps(doc))
    plant_verdict(tmp_path, "stuck", 2, age=0.0)
    held = handler(tmp_path, "--cooldown", "900")
    assert restarts(tmp_path) == 1, held.out
    assert re.search(r"restart refused: verdict 'stuck', but the last restart was [0-9] s ago \(cooldown 900 s\)",
                     held.out), held.out


def one_restart_redated(tmp: Path, at: float, done: float) -> Path:
    """One real restart on record, then dated `at` .. `done` on the wall clock alone (as another clock, or a
    slow command, left it)."""
    plant_verdict(tmp, "stuck", 2, age=0.0)
    assert handler(tmp, "--cooldown", "0").code == 0 and restarts(tmp) == 1
    path = history_path(tmp / "state", URL)
    doc = json.loads(path.read_text())
    [entry] = doc["data"]["restarts"]
    entry.update(at=at, done=done)
    del entry["mono"], entry["boot"]  # and no boot-time clock to measure it by (an older handler, another boot)
    path.write_text(json.dumps(doc))
    return path


def test_the_log_counts_restarts_as_the_circuit_breaker_does(tmp_path):
    """A restart whose command began 3700 s ago but finished 3500 s ago is in the breaker's hour (it counts
    from when it finished): the log's "restart N of at most M" counts it too, from the same history."""
    one_restart_redated(tmp_path, time.time() - 3700, time.time() - 3500)
    plant_verdict(tmp_path, "stuck", 2, age=0.0)
    out = handler(tmp_path, "--cooldown", "0", "--max-per-hour", "3")
    assert restarts(tmp_path) == 2 and "restart 2 of at most 3 this hour" in out.out, out.out


def test_a_restart_dated_in_the_future_counts_from_now_not_until_the_clock_catches_up(tmp_path):
    """The clock stepped back an hour after a restart: one cooldown from then, not an hour of refusals."""
    path = one_restart_redated(tmp_path, time.time() + 3600, time.time() + 3600)  # as a clock 1 h fast wrote it

    time.sleep(0.05)
    plant_verdict(tmp_path, "stuck", 2, age=0.0)
    before = time.time()
    seen = handler(tmp_path, "--cooldown", "1")
    after = time.time()
    assert restarts(tmp_path) == 1, seen.out
    assert "in the future (the clock stepped back): counted from now" in seen.out, seen.out
    [entry] = json.loads(path.read_text())["data"]["restarts"]
    assert before <= entry["at"] <= after and before <= entry["done"] <= after, (before, entry, after)  # now's

    time.sleep(1.1)
    plant_verdict(tmp_path, "stuck", 2, age=0.0)  # a check of the server since the step: still stuck
    later = handler(tmp_path, "--cooldown", "1")
    assert later.code == 0 and restarts(tmp_path) == 2, later.out
    assert ": restarted: verdict 'stuck'" in later.out, later.out


@pytest.mark.parametrize("word, state", [("busy", 0), ("stalling", 1), ("unresponsive", 1), ("idle", 0)])
def test_healthy_or_unproven_verdicts_never_restart(tmp_path, word, state):
    plant_verdict(tmp_path, word, state)
    out = handler(tmp_path)
    assert out.code == 0 and restarts(tmp_path) == 0, out.out


def test_stale_or_missing_or_corrupt_state_never_restarts(tmp_path):
    assert "none written yet" in handler(tmp_path).out
    plant_verdict(tmp_path, "stuck", 2, age=700)
    assert "not fresh" in handler(tmp_path).out
    state_path(tmp_path / "state", URL).write_text("{not json")
    assert "state file corrupt" in handler(tmp_path).out
    assert restarts(tmp_path) == 0


def test_soft_and_ok_calls_do_not_touch_the_state_dir(tmp_path):
    out = handler(tmp_path, state="CRITICAL", state_type="SOFT")
    assert out.code == 0 and "waiting for a HARD state" in out.out
    out = handler(tmp_path, state="OK", state_type="HARD")
    assert "OK, not CRITICAL" in out.out
    assert not (tmp_path / "state").exists()


def test_concurrent_calls_restart_once(tmp_path):
    """Two services (or two results) call the handler at the same moment: one restart, one refusal."""
    plant_verdict(tmp_path, "stuck", 2)
    counter = tmp_path / "restarts.txt"
    slow = [sys.executable, "-c", f"import time; open({str(counter)!r}, 'a').write('r\\n'); time.sleep(1.5)"]
    argv = lambda: [script("check_vllm_restart"), "--state", "CRITICAL", "--state-type", "HARD", "--url", URL,  # noqa: E731
                    "--state-dir", str(tmp_path / "state"), "--cooldown", "0", "--", *slow]
    procs = [subprocess.Popen(argv(), stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert restarts(tmp_path) == 1, outs
    assert sum("restarted:" in o for o in outs) == 1
    assert sum("before the last restart" in o for o in outs) == 3, outs


def test_lock_held_too_long_means_no_restart(tmp_path):
    plant_verdict(tmp_path, "stuck", 2)
    hist = StateFile(history_path(tmp_path / "state", URL), target_key(URL, "restart-history"))
    hist.lock()
    try:
        out = handler(tmp_path, "--lock-timeout", "0.3")
    finally:
        hist.unlock()
    assert out.code == 0 and restarts(tmp_path) == 0
    assert "holds the restart lock" in out.out


def test_a_failed_restart_exits_1_removes_the_marker_and_still_counts(tmp_path):
    plant_verdict(tmp_path, "down", 2)
    out = handler(tmp_path, command=[sys.executable, "-c", "print('Job for vllm.service failed'); raise SystemExit(5)"])
    assert out.code == 1
    assert "restart failed" in out.out and "exited 5: Job for vllm.service failed" in out.out
    assert not marker_path(tmp_path / "state", URL).exists()
    hist = json.loads(history_path(tmp_path / "state", URL).read_text())["data"]["restarts"]
    assert [h["rc"] for h in hist] == [5]
    plant_verdict(tmp_path, "down", 2, age=0.0)
    assert "cooldown 900" in handler(tmp_path).out  # a failed attempt still holds the cooldown


def test_a_hanging_restart_is_killed(tmp_path):
    plant_verdict(tmp_path, "down", 2)
    # no clock: the command sleeps past the run's own limit (run_script's 60 s), so a handler that waited it out
    # fails there; the line says the handler's --command-timeout ended it
    out = handler(tmp_path, "--command-timeout", "1", command=["sleep", "300"])
    assert out.code == 1 and "timed out after 1 s and was killed" in out.out, out.out


def test_a_missing_command_binary_is_a_failed_restart(tmp_path):
    plant_verdict(tmp_path, "down", 2)
    out = handler(tmp_path, command=["/nonexistent/restart-vllm"])
    assert out.code == 1 and "cannot run" in out.out


def test_the_command_is_never_run_through_a_shell(tmp_path):
    plant_verdict(tmp_path, "stuck", 2)
    witness = tmp_path / "pwned"
    out = handler(tmp_path, command=["echo", f"; touch {witness}"])
    assert out.code == 0 and not witness.exists()


def test_dry_run_decides_but_does_not_act(tmp_path):
    plant_verdict(tmp_path, "stuck", 2)
    out = handler(tmp_path, "--dry-run")
    assert "would restart (--dry-run)" in out.out and restarts(tmp_path) == 0
    assert not marker_path(tmp_path / "state", URL).exists()


@pytest.mark.parametrize("argv, message", [
    (["--state-type", "HARD", "--url", URL, "--", "true"], "--state"),
    (["--state", "CRIT", "--state-type", "HARD", "--url", URL, "--", "true"], "--state must be"),
    (["--state", "CRITICAL", "--state-type", "FIRM", "--url", URL, "--", "true"], "--state-type must be"),
    (["--state", "CRITICAL", "--state-type", "HARD", "--url", "vllm:8000", "--", "true"], "--url must"),
    (["--state", "CRITICAL", "--state-type", "HARD", "--url", URL], "no restart command"),
    (["--state", "CRITICAL", "--state-type", "HARD", "--url", URL, "--cooldown", "-5", "--", "true"], "--cooldown"),
    (["--state", "CRITICAL", "--state-type", "HARD", "--url", URL, "--max-per-hour", "0", "--", "true"],
     "--max-per-hour"),
])
def test_bad_usage_is_clear_and_restarts_nothing(tmp_path, argv, message):
    plant_verdict(tmp_path, "stuck", 2)
    argv = [a if a != "true" else str(tmp_path / "would-run") for a in argv]
    out = run_script("check_vllm_restart", "--state-dir", str(tmp_path / "state"), *argv, timeout=30)
    assert out.code == 2
    assert out.out.startswith("check_vllm_restart: usage error:") and message in out.out
    assert "nothing restarted" in out.out and "Traceback" not in out.out + out.err


def test_numeric_state_macros_are_accepted(tmp_path):
    plant_verdict(tmp_path, "stuck", 2)
    out = handler(tmp_path, state="2", state_type="1")
    assert out.code == 0 and restarts(tmp_path) == 1
    assert "CRITICAL HARD attempt 3: restarted" in out.out


def test_help_and_version_exit_0():
    for flag in ("--help", "--version"):
        out = run_script("check_vllm_restart", flag, timeout=30, installed=True)  # the script itself
        assert out.code == 0 and "check_vllm_restart" in out.out


def test_a_verdict_written_while_the_restart_ran_is_about_the_old_process(tmp_path):
    """The check may run while the old process is being stopped; that verdict must not restart again,
    and the start-up grace counts from the end of the restart."""
    plant_verdict(tmp_path, "stuck", 2)
    repo, tmp = str(Path(__file__).parents[2]), str(tmp_path)
    code = (f"import time, sys; sys.path.insert(0, {repo!r}); time.sleep(0.4); "
            "from tests.handler.test_handler import plant_verdict; from pathlib import Path; "
            f"plant_verdict(Path({tmp!r}), 'stuck', 2, age=0.0); time.sleep(0.4)")
    t0 = time.time()
    out = handler(tmp_path, "--cooldown", "0", command=[sys.executable, "-c", code])
    t1 = time.time()
    assert out.code == 0 and ": restarted:" in out.out, out.out + out.err
    at = read_marker(marker_path(tmp_path / "state", URL), clock.now())
    assert at is not None and t0 + 0.7 <= at.wall <= t1
    again = handler(tmp_path, "--cooldown", "0")
    assert "before the last restart" in again.out, again.out


def test_a_command_that_leaves_the_server_running_in_the_background_is_done_when_it_exits(tmp_path):
    """`nohup vllm serve ... &`: the server inherits the command's stdout. The handler waits for the
    command's exit, not for that output to close, and never kills what the command left running."""
    plant_verdict(tmp_path, "down", 2)
    pid_file = tmp_path / "server.pid"
    command = ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; echo started the server"]
    out = handler(tmp_path, "--command-timeout", "30", command=command)
    server = int(pid_file.read_text())
    try:
        # no clock: a handler that waited for the output to close (the server's, for 300 s) would have hit
        # --command-timeout 30 and said the command timed out
        assert out.code == 0 and ": restarted:" in out.out, out.out + out.err
        assert read_marker(marker_path(tmp_path / "state", URL), clock.now()) is not None
        os.kill(server, 0)  # still running: raises ProcessLookupError if the handler killed it
        assert Path(f"/proc/{server}/stat").read_text().split()[2] != "Z"
    finally:
        os.kill(server, signal.SIGKILL)


@pytest.mark.parametrize("how", ["parent is a file", "immutable directory"])
def test_a_state_directory_it_cannot_write_is_said_and_restarts_nothing(tmp_path, how):
    """Not "another call holds the lock": what is wrong with the directory, and no restart."""
    plant_verdict(tmp_path, "down", 2)
    if how == "parent is a file":
        (tmp_path / "file").write_text("")
        state_dir = tmp_path / "file" / "state"
        extra = ["--state-dir", str(state_dir)]  # the later --state-dir wins over handler()'s
    else:
        state_dir, extra = tmp_path / "state", []
        if subprocess.run(["chattr", "+i", str(state_dir)], capture_output=True).returncode:
            pytest.skip("no chattr +i here")
    try:
        out = handler(tmp_path, *extra, "--lock-timeout", "0.3")
    finally:
        subprocess.run(["chattr", "-i", str(state_dir)], capture_output=True)
    assert out.code == 1 and restarts(tmp_path) == 0, out.out + out.err
    assert f"no restart: cannot write the state directory {state_dir}" in out.out
    assert "holds the restart lock" not in out.out and "Traceback" not in out.err


SPELLINGS = ["http://127.0.0.1:1", "http://localhost:1", "http://LOCALHOST:1/."]


def test_three_spellings_of_one_server_share_one_lock_and_one_history(tmp_path):
    """One frozen server, three services spelling its URL differently: one restart, then the cooldown."""
    for url in SPELLINGS:
        plant_verdict(tmp_path, "down", 2, url=url)
    assert len({history_path(tmp_path / "state", u) for u in SPELLINGS}) == 1
    first = handler(tmp_path, url=SPELLINGS[0])
    assert ": restarted:" in first.out, first.out + first.err
    for url in SPELLINGS[1:]:
        plant_verdict(tmp_path, "down", 2, age=0.0, url=url)
        again = handler(tmp_path, url=url)
        assert "cooldown 900" in again.out, again.out
    assert restarts(tmp_path) == 1


def test_a_restart_history_kept_under_the_old_key_still_holds_the_cooldown(tmp_path):
    """Files written before the key was made canonical are named by the URL as spelt: still read."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    StateFile(history_path(state, URL, legacy=True), legacy_key(URL, "restart-history")).save(
        {"restarts": [{"at": time.time() - 60, "verdict": "down", "command": "x", "rc": 0}]})
    plant_verdict(tmp_path, "down", 2, age=0.0)
    out = handler(tmp_path)
    assert "cooldown 900" in out.out and restarts(tmp_path) == 0, out.out
