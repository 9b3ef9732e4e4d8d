"""check_vllm_restart and the server's life outside its own restarts: a start it did not make (the host's
process is young and has not served) is never restarted; a downtime or an acknowledgement holds it back;
and `--status` makes the restart decision a service state, so the handler is called when a restart becomes
due whatever the main service's state history. Real files, real processes (no scheduler: see the tiers)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.instants import Instant
from check_vllm.memory.statefile import check_file
from check_vllm.restart.policy import Event, screen
from tests.rig.loading_vllm import Loaders, free_port
from tests.rig.scripts import Result, run_check, run_script


@pytest.fixture
def target(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    yield f"http://127.0.0.1:{port}", tmp_path


def plant(tmp: Path, url: str, word: str = "down", state: int = 2, age: float = 1.0) -> None:
    d = tmp / "state"
    d.mkdir(exist_ok=True, mode=0o700)
    check_file(d, url, proxy=False).save(
        {"verdict": {"word": word, "state": state, "text": "planted", "at": time.time() - age, "engines": {}}})


def handler(tmp: Path, url: str, *extra: str, state: str = "CRITICAL") -> Result:
    counter = tmp / "restarts.txt"
    return run_script("check_vllm_restart", "--state", state, "--state-type", "HARD", "--attempt", "3", "--url",
                      url, "--state-dir", str(tmp / "state"), *extra, "--", sys.executable, "-c",
                      f"open({str(counter)!r}, 'a').write('restart\\n')")


def status(tmp: Path, url: str, *extra: str) -> Result:
    return run_script("check_vllm_restart", "--status", "--url", url, "--state-dir", str(tmp / "state"), *extra)


def restarts(tmp: Path) -> int:
    f = tmp / "restarts.txt"
    return len(f.read_text().splitlines()) if f.exists() else 0


@pytest.fixture
def loading(tmp_path: Path) -> Iterator:
    made = Loaders(tmp_path)
    yield lambda url: made(int(url.rsplit(":", 1)[1]))
    made.close()


def test_a_start_the_check_has_not_seen_yet_is_never_restarted(target, loading):
    url, tmp = target
    plant(tmp, url, "down")  # the check saw nothing listening; since then someone started the server
    proc = loading(url)
    out = handler(tmp, url)
    assert out.code == 0 and restarts(tmp) == 0, out.out + out.err
    assert f"restart refused: verdict 'down', but the server is starting: vLLM process {proc.pid} started" \
        in out.out, out.out
    proc.kill()
    proc.wait()
    again = handler(tmp, url)  # the process is gone: down is down
    assert ": restarted: verdict 'down'" in again.out and restarts(tmp) == 1, again.out


def test_a_server_that_is_stopping_is_never_restarted_until_the_stop_grace_ends(target, tmp_path):
    """The check saw it serve, then refuse (an operator's `supervisorctl restart` whose stop takes a while):
    stopping, then down once --stop-grace ends. The handler, called on that HARD down, asks the host and
    judges with the check's judge and the check's memory of when the refusals began."""
    url, tmp = target
    made = Loaders(tmp_path / "procs")

    def check(*extra: str) -> Result:
        return run_check(tmp / "state", "-u", url, "--min-gap", "0", *extra)
    try:
        proc = made.serving(int(url.rsplit(":", 1)[1]))
        assert check().code == 0
        made.stop(proc)
        assert check().out.startswith("VLLM WARNING - stopping:")
        time.sleep(1.1)
        down = check("--stop-grace", "1")
        assert down.code == 2 and down.out.startswith("VLLM CRITICAL - down: refusing"), down.out
        out = handler(tmp, url)  # its --stop-grace is the default 120 s: the stop began 1 s ago
        assert out.code == 0 and restarts(tmp) == 0, out.out + out.err
        assert re.search(rf"restart refused: verdict 'down', but the server is stopping: vLLM process {proc.pid} "
                         rf"served and still lives, refusing for \d+\.\d s \(grace 120 s", out.out), out.out
        late = handler(tmp, url, "--stop-grace", "1")  # the check's own value
        assert ": restarted: verdict 'down'" in late.out and restarts(tmp) == 1, late.out
    finally:
        made.close()


def test_past_the_grace_a_process_that_never_served_is_restarted(target, loading):
    url, tmp = target
    plant(tmp, url, "down")
    loading(url)
    time.sleep(1.1)
    out = handler(tmp, url, "--start-grace", "1")
    assert ": restarted: verdict 'down'" in out.out and restarts(tmp) == 1, out.out


@pytest.mark.parametrize("flags, why", [
    (("--service-downtime", "1"), "the service is in a scheduled downtime"),
    (("--host-downtime", "2"), "its host is in a scheduled downtime"),
    (("--acknowledged", "1"), "an operator acknowledged the problem"),
])
def test_a_downtime_or_an_acknowledgement_holds_a_restart_back(target, flags, why):
    url, tmp = target
    plant(tmp, url, "stuck")
    out = handler(tmp, url, *flags)
    assert out.code == 0 and restarts(tmp) == 0
    assert f"restart refused: CRITICAL HARD, but {why}" in out.out, out.out
    unset = handler(tmp, url, "--service-downtime", "", "--host-downtime", "0", "--acknowledged", "")
    assert ": restarted: verdict 'stuck'" in unset.out and restarts(tmp) == 1, unset.out


def test_the_main_services_downtime_given_beside_the_own_one_holds_a_restart_back(target):
    """Nagios' restart service passes its own depth and the main service's ($SERVICEDOWNTIME::vllm$): either
    above 0 holds; an on-demand macro that found no service is empty."""
    url, tmp = target
    plant(tmp, url, "stuck")
    out = handler(tmp, url, "--service-downtime=1", "--service-downtime=0")
    assert "restart refused: CRITICAL HARD, but the service is in a scheduled downtime" in out.out, out.out
    assert restarts(tmp) == 0
    out = handler(tmp, url, "--service-downtime=0", "--service-downtime=")
    assert ": restarted: verdict 'stuck'" in out.out and restarts(tmp) == 1, out.out


def test_screen_is_pure_and_names_the_hold():
    assert screen(Event("CRITICAL", "HARD", 3, service_downtime=1)).kind == "refuse"
    assert screen(Event("CRITICAL", "HARD", 3, acknowledged=True)).kind == "refuse"
    assert screen(Event("CRITICAL", "HARD", 3)) is None
    assert screen(Event("WARNING", "HARD", 3, service_downtime=1)).kind == "skip"


def test_status_is_the_handlers_decision_as_a_service_state(target):
    url, tmp = target
    plant(tmp, url, "busy", 0)
    ok = status(tmp, url)
    assert ok.code == 0 and ok.out.startswith("VLLM_RESTART OK - nothing to restart: the check's last "
                                                       "verdict is 'busy'"), ok.out
    plant(tmp, url, "stuck")  # proven stuck while the main service was already CRITICAL for a threshold
    due = status(tmp, url)
    assert due.code == 2 and due.out.startswith("VLLM_RESTART CRITICAL - due: verdict 'stuck'"), due.out
    assert restarts(tmp) == 0  # --status restarts nothing
    assert ": restarted:" in handler(tmp, url).out and restarts(tmp) == 1
    time.sleep(0.2)
    plant(tmp, url, "stuck", age=0.0)  # the restarted server is stuck again, inside the cooldown
    held = status(tmp, url)
    assert held.code == 1 and "held back: verdict 'stuck', but the last restart was" in held.out, held.out
    after = status(tmp, url, "--cooldown", "0")  # the cooldown over: due again, a state change, a handler call
    assert after.code == 2, after.out
    down = status(tmp, url, "--host-downtime", "1")
    assert down.code == 1 and "scheduled downtime" in down.out


def test_status_holds_a_restart_back_while_the_main_service_is_soft(target):
    """The restart service is HARD at once (max_check_attempts 1): without the main service's state type it
    would make a restart due on the main service's first CRITICAL, before its retries confirmed it."""
    url, tmp = target
    plant(tmp, url, "down")
    soft = status(tmp, url, "--state-type", "0", "--attempt", "1")  # Icinga 2 passes 0/1 and check_attempt
    assert soft.code == 1, soft.out
    assert soft.out.startswith("VLLM_RESTART WARNING - held back: the main service is CRITICAL SOFT, attempt 1, "
                                  "a restart waits for its HARD state (verdict 'down' (planted)"), soft.out
    hard = status(tmp, url, "--state-type", "HARD")
    assert hard.code == 2 and hard.out.startswith("VLLM_RESTART CRITICAL - due: verdict 'down'"), hard.out
    unknown = status(tmp, url, "--state-type=")  # Nagios' on-demand macro of a service it does not know: empty
    assert unknown.code == 2, unknown.out
    plant(tmp, url, "busy", 0)
    quiet = status(tmp, url, "--state-type", "SOFT")  # nothing to restart: SOFT changes nothing
    assert quiet.code == 0 and "nothing to restart" in quiet.out, quiet.out
    bad = status(tmp, url, "--state-type", "LATER")
    assert bad.code == 3 and "--state-type must be SOFT or HARD" in bad.out, bad.out


def test_status_holds_a_restart_back_until_the_main_service_has_taken_its_critical_result_in(target):
    """The check writes its verdict before the scheduler takes its result in: a restart service checked in between
    saw the main service still OK HARD (its last state) and made a restart due on one CRITICAL SOFT result (the
    incident tier, a killed engine restarted at the main service's SOFT 1/3). With the main service's state
    (Icinga 2's `state`, Nagios' $SERVICESTATEID::vllm$), nothing is due before it is CRITICAL."""
    url, tmp = target
    plant(tmp, url, "down")
    early = status(tmp, url, "--state", "0", "--state-type", "1")  # Icinga 2's numbers: OK HARD
    assert early.code == 1, early.out
    assert early.out.startswith("VLLM_RESTART WARNING - held back: the main service is still OK, a restart waits "
                                "for its CRITICAL HARD state (verdict 'down' (planted)"), early.out
    due = status(tmp, url, "--state", "2", "--state-type", "1")
    assert due.code == 2 and due.out.startswith("VLLM_RESTART CRITICAL - due: verdict 'down'"), due.out
    unset = status(tmp, url, "--state=", "--state-type", "HARD")  # a macro of a service it does not know: empty
    assert unset.code == 2, unset.out
    plant(tmp, url, "busy", 0)
    quiet = status(tmp, url, "--state", "OK", "--state-type", "HARD")
    assert quiet.code == 0 and "nothing to restart" in quiet.out, quiet.out
    bad = status(tmp, url, "--state", "LATER")
    assert bad.code == 3 and "--state must be OK, WARNING, CRITICAL or UNKNOWN" in bad.out, bad.out


def test_status_usage_errors_are_unknown_not_critical(tmp_path):
    out = run_script("check_vllm_restart", "--status", "--url", "ftp://x")
    assert out.code == 3 and out.out.startswith("VLLM_RESTART UNKNOWN - usage:"), out.out
    bad = run_script("check_vllm_restart", "--status", "--url", "http://127.0.0.1:1", "--service-downtime", "x")
    assert bad.code == 3, bad.out + bad.err


def test_a_restart_in_progress_reads_as_now_until_the_command_ends(tmp_path):
    """While the restart command runs, the frozen server may still answer /metrics: the check must not
    take those readings as "the restarted server served" and call the stop that follows "down"."""
    from check_vllm.memory.files import write_json
    from check_vllm.memory.marker import load_marker

    marker = tmp_path / "marker.json"
    write_json(marker, {"restarted_at": time.time() - 30, "in_progress": True})
    now = Instant(time.time())
    at, note = load_marker(marker, now)
    assert note is None and at == now
    write_json(marker, {"restarted_at": time.time() - 5000, "in_progress": True})  # a handler that died
    assert load_marker(marker, now)[0].wall < time.time() - 4000
    write_json(marker, {"restarted_at": time.time() - 30})
    assert time.time() - load_marker(marker, now)[0].wall > 25
