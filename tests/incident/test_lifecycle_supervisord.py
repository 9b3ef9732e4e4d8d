"""The server's life under a real supervisord and a real Icinga 2, without a real vLLM: a `vllm serve` that
never finishes loading (it binds the port and never listens, as vLLM does while it builds its engine) and
one that crash-loops while it loads (supervisord restarts it each time it dies). The shipped CheckCommand and
EventCommand, the handler restarting through `supervisorctl restart vllm`, `--start-grace` short (issue 17):

- never finishes: `starting` (WARNING) through the grace, then HARD CRITICAL `down`, exactly one restart; the
  restarted process loads for ever too and the cooldown holds the handler back;
- crash loop: CRITICAL `down` within a few starts, and the circuit breaker stops the handler. Icinga 2 runs an
  event handler on a SOFT result, a HARD change or a recovery (`Checkable::ProcessCheckResult`), so a steady HARD
  CRITICAL crash loop gets one restart and then no more calls: the breaker only has work when the handler is called
  again. The service here is `volatile`, the worst case (the handler on every CRITICAL result), so the breaker,
  not Icinga 2's scheduling, is what must stop it.

No real vLLM runs here, so no heavy lock is taken; the processes are a few lines of Python.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.incident import SERVICE, IcingaWithTimes, plugin_dir, service_conf, word_of
from tests.rig.monitoring import count_lines, ensure_installed, free_port, wait_for
from tests.rig.supervisor import Supervisord

pytestmark = pytest.mark.incident

LOADS_FOR_EVER = """\
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])))  # bound, never listening
time.sleep(3600)
"""

DIES_WHILE_LOADING = """\
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])))
time.sleep(2.5)
sys.exit("engine core failed to start")  # as a model that does not fit would make it
"""

GRACE = 12


class Rig:
    """supervisord running one fake `vllm serve` program, Icinga 2 checking it with the shipped commands."""

    def __init__(self, root: Path, script: str, handler: dict[str, int], volatile: bool = False) -> None:
        ensure_installed()
        self.sup = Supervisord(root / "supervisor", Path(sys.prefix), root / "no-model", free_port())
        program = root / "bin" / "vllm"
        program.parent.mkdir(parents=True)
        program.write_text(script)
        self.sup.program_conf.write_text(f"""[program:vllm]
command={sys.executable} {program} serve tiny --port {self.sup.port}
autostart=true
autorestart=true
startsecs=1
startretries=1000
stopsignal=TERM
stopwaitsecs=5
stopasgroup=true
killasgroup=true
stdout_logfile={self.sup.vllm_log}
redirect_stderr=true
""")
        self.handler_log = root / "check_vllm_restart.log"
        conf = service_conf(self.sup.url, root / "state", self.sup.ctl_argv("restart", "vllm"), self.handler_log)
        for key, value in {"vllm_start_grace": GRACE, **handler}.items():
            conf = "\n".join(f"  vars.{key} = {value}" if line.startswith(f"  vars.{key} = ") else line
                             for line in conf.splitlines())
        if volatile:
            conf = conf.replace("  max_check_attempts = ", "  volatile = true\n  max_check_attempts = ", 1)
        self.icinga = IcingaWithTimes(root / "icinga2", plugin_dir(root), conf)

    def start(self) -> None:
        self.sup.start()
        checked = self.icinga.validate()
        assert checked.returncode == 0, checked.stdout[-3000:]
        self.icinga.start()

    def stop(self) -> None:
        self.icinga.stop()
        self.sup.stop()

    def lines(self) -> list[str]:
        return self.handler_log.read_text().splitlines() if self.handler_log.exists() else []

    def restarts(self) -> list[str]:
        return [ln for ln in self.lines() if ": restarted: " in ln]

    def results(self) -> list[dict]:
        return self.icinga.results_of(SERVICE)

    def diag(self) -> str:
        return "\n".join([self.icinga.diag(), "--- handler", *self.lines()[-10:], "--- results",
                          *(f"{r['state']} {'HARD' if r['hard'] else 'SOFT'} {r['output'][:150]}"
                            for r in self.results()[-10:])])


@pytest.fixture
def rig(tmp_path: Path) -> Iterator:
    made: list[Rig] = []

    def make(script: str, volatile: bool = False, **handler: int) -> Rig:
        r = Rig(tmp_path / f"rig{len(made)}", script, handler, volatile)
        made.append(r)
        r.start()
        return r
    yield make
    for r in made:
        r.stop()


def test_a_server_that_never_finishes_starting_is_restarted_exactly_once(rig):
    r = rig(LOADS_FOR_EVER, vllm_restart_cooldown=600)
    t0 = time.time()
    wait_for("the restart of the server that never loads", lambda: r.restarts(), GRACE + 60, diag=r.diag)
    t_restart = time.time()
    # the restarted process loads for ever too: down again after its grace, and the cooldown holds
    wait_for("the refusal in the cooldown", lambda: any("cooldown 600 s" in ln for ln in r.lines()), GRACE + 60,
             diag=r.diag)
    results = r.results()
    words = [(word_of(x["output"]), x["state"], x["hard"]) for x in results]
    first_down = next(i for i, (w, s, _) in enumerate(words) if w == "down")
    assert first_down >= 1 and all(w == "starting" and s == 1 for w, s, _ in words[:first_down]), words
    assert "not serving" in results[first_down]["output"] and "after its start" in results[first_down]["output"]
    assert any(w == "down" and s == 2 and hard for w, s, hard in words), words
    assert len(r.restarts()) == 1 and "verdict 'down'" in r.restarts()[0], r.lines()
    spawned = [ln for ln in r.sup.log_lines() if "spawned: 'vllm'" in ln]
    assert len(spawned) == 2, spawned  # the boot and the handler's one restart
    print(f"never loads: first check {results[0]['at'] - t0:+.0f} s, {first_down} x starting, first down "
          f"{results[first_down]['at'] - t0:.0f} s after Icinga 2 started, restart at {t_restart - t0:.0f} s; "
          f"verdicts {[w for w, _, _ in words]}")


def test_a_crash_loop_is_down_within_a_few_starts_and_the_breaker_stops_the_handler(rig):
    r = rig(DIES_WHILE_LOADING, volatile=True, vllm_restart_cooldown=1, vllm_restart_max_per_hour=2)
    wait_for("the circuit breaker", lambda: any("circuit breaker open" in ln for ln in r.lines()), 150,
             diag=r.diag)
    results = r.results()
    downs = [x for x in results if x["state"] == 2 and word_of(x["output"]) == "down"]
    # a check between one process's death and the next one's spawn sees no process: plain down; the count
    # of processes that never served names the crash loop
    assert any("crash loop: " in x["output"] for x in downs), r.diag()
    spawned_before = [ln for ln in r.sup.log_lines() if "spawned: 'vllm'" in ln]
    assert len(r.restarts()) == 2, r.lines()  # --max-per-hour 2, then the breaker
    assert all(word_of(x["output"]) in ("starting", "down") for x in results), r.diag()
    assert count_lines(r.handler_log) >= 3
    loop = next(x for x in downs if "crash loop: " in x["output"])
    print(f"crash loop: {len(spawned_before)} processes spawned, {len(r.restarts())} restarts, then the breaker; "
          f"first crash-loop verdict: {loop['output'][:120]}")
