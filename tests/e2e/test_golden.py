"""Golden status lines: the installed check_vllm against the simulator, the whole first line compared exactly.

In the style of check_patroni's tests: one row per case gives the scenario, the extra arguments, the exit code
and the expected first line of stdout, perfdata included. A wording change anywhere in the line (the verdict
word, a fixed text, a count, a perfdata label or unit, a ``U``, the order) fails a test, on purpose: update the
row in the same change that means to change the wording.

Only numbers that depend on real elapsed time are masked, by ``normalise`` below: rates, how long a stall or an
unresponsive streak lasted, probe latencies, ages and clock times, what ``-t`` left a read, and the KV-cache
usage of a busy engine (the simulator moves it with time). Everything else is literal. ``{url}`` and
``{state}`` in an expected line stand for the simulator's URL and the run's state directory; ``{server_pid}``
(in arguments too) for the simulator's process, this one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from check_vllm.contract.vocab import WORDS
from tests.rig.scripts import run_check, run_script, script
from vllm_simulator import Simulator

from .conftest import FAST

OK, WARNING, CRITICAL = 0, 1, 2


CHECK = script("check_vllm")
#: Between two runs of one case: more than --min-gap (FAST), so the second run compares instead of repeating.
GAP = 0.4
#: Common to every run; a row's own arguments come later and win (argparse keeps the last value).
COMMON = ("-t", "10", *FAST)
#: Root writes anywhere whatever the mode; without these capabilities it obeys the mode like anyone.
AS_ORDINARY_USER = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search") if os.geteuid() == 0 else ()

# --------------------------------------------------------------------------- the one normaliser

#: A number other than zero, as the check prints it ("0.4", "12", "99.1", "0.052"; not "0", "0.0").
_NONZERO = r"(?:0\.\d*[1-9]\d*|[1-9]\d*(?:\.\d+)?)"

#: (what it masks, pattern, replacement). An exact zero rate or stall is no measurement of time (a frozen
#: counter's rate, no stall yet, a first failure), so those stay literal; latencies and ages never do.
MASKS: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (what, re.compile(pattern), replacement) for what, pattern, replacement in (
        ("rates in perfdata", rf"\b(tokens_per_second|prompt_tokens_per_second|steps_per_second)={_NONZERO};",
         r"\1=<N>;"),
        ("the rate in the text", rf", {_NONZERO} tok/s\b", ", <N> tok/s"),
        ("stall length in perfdata", rf"\bstalled_seconds={_NONZERO}s;", "stalled_seconds=<N>s;"),
        ("stall or unresponsive streak length", rf"\bfor {_NONZERO} s\b", "for <N> s"),
        ("probe latency in perfdata", r"\bprobe_seconds=[0-9.]+s;", "probe_seconds=<N>s;"),
        ("probe latency in the text", r"\bprobe answered in [0-9.]+ s\b", "probe answered in <N> s"),
        ("ages (restart, repeated verdict)", r"\b[0-9.]+ s ago\b", "<N> s ago"),
        ("clock time of a restart", r"\(at \d\d:\d\d:\d\d\)", "(at <HH:MM:SS>)"),
        ("what -t left the /metrics read", r"\bGET /metrics timed out after [0-9.]+ s\b",
         "GET /metrics timed out after <N> s"),
        ("a busy engine's moving KV cache (whole numbers such as 0% or 50% stay)",
         r"\bkv_cache_usage([= ])\d+\.\d+%", r"kv_cache_usage\1<N>%"),
    )
)


def normalise(line: str) -> str:
    for _, pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    return line


def test_normaliser_masks_only_elapsed_time():
    raw = ("VLLM WARNING - stalling: no progress for 0.4 s over 1 reading (stuck at 2 readings and 0.0 s); "
           "2 running, 2 waiting, 99.1 tok/s; kv_cache_usage 63.6% outside range 0:20 | "
           "kv_cache_usage=63.6%;20;;0;100 probe_seconds=0.004s;;;0 prompt_tokens_per_second=0;;;0 running=2;;;0 "
           "stalled_seconds=0.405s;;;0 steps_per_second=49.5;;;0 tokens_per_second=U;;;0 waiting=2;;;0")
    assert normalise(raw) == (
        "VLLM WARNING - stalling: no progress for <N> s over 1 reading (stuck at 2 readings and 0.0 s); "
        "2 running, 2 waiting, <N> tok/s; kv_cache_usage <N>% outside range 0:20 | "
        "kv_cache_usage=<N>%;20;;0;100 probe_seconds=<N>s;;;0 prompt_tokens_per_second=0;;;0 running=2;;;0 "
        "stalled_seconds=<N>s;;;0 steps_per_second=<N>;;;0 tokens_per_second=U;;;0 waiting=2;;;0")
    for literal in ("(for 0.0 s, 1 reading in a row)", "kv_cache_usage=50%;;;0;100", "stalled_seconds=0s;;;0",
                    "new process <N> s ago (at <HH:MM:SS>)"):
        assert normalise(literal) == literal
    assert normalise("new process 0.2 s ago (at 09:25:27)") == "new process <N> s ago (at <HH:MM:SS>)"
    assert normalise("(POST /v1/completions timed out after 1.5 s)") == "(POST /v1/completions timed out after 1.5 s)"


# --------------------------------------------------------------------------- the table

#: Perfdata of a run that got no reading: every value unknown.
_NO_READING = ("kv_cache_usage=U;;;0;100 prompt_tokens_per_second=U;;;0 running=U;;;0 stalled_seconds=U;;;0 "
               "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=U;;;0")


@dataclass(frozen=True)
class Case:
    id: str
    scenario: str
    args: tuple[str, ...]
    code: int
    #: The normalised first line; a tuple lists the only lines allowed when a race decides (see the row).
    line: str | tuple[str, ...]
    #: Runs of the same command; the last one is pinned, the earlier ones make its baseline (GAP apart).
    runs: int = 1
    #: Done just before the last run: "restart" the simulated process, or let check_vllm_restart "handle" it.
    before_last: str | None = None
    #: The state directory exists but nothing can be created in it.
    read_only_state: bool = False
    sim: dict[str, Any] = field(default_factory=dict)


CASES = [
    # --- the monitoring side, and a URL with more than one server behind it -------------------------------
    Case("unreachable", "idle", ("-u", "http://nonexistent.invalid:8000"), 3,
         "VLLM UNKNOWN - unreachable: DNS lookup failed (Name or service not known) (http://nonexistent.invalid:8000): "
         "the monitoring side cannot reach the server; a restart would not help | " + _NO_READING),
    Case("balancer", "busy", (), WARNING,
         "VLLM WARNING - balancer: /metrics comes from more than one server process in turn (this reading continues "
         "a process older than the one before): the URL looks like a load balancer; check it with --proxy, and "
         "check each backend directly | kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=U;;;0 running=2;;;0 "
         "stalled_seconds=0s;;;0 steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=3;;;0",
         runs=2, before_last="older"),
    # --- busy ------------------------------------------------------------------------------------------------
    Case("busy-first-reading", "busy", ("--reread-delay", "60"), OK,
         "VLLM OK - busy: 2 running, 3 waiting (first reading: progress not yet measured) | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=U;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=3;;;0"),
    Case("busy-first-run-reads-twice", "busy", (), OK,
         "VLLM OK - busy: 2 running, 3 waiting, <N> tok/s | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=<N>;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=3;;;0"),
    Case("busy-steady", "busy", (), OK,
         "VLLM OK - busy: 2 running, 3 waiting, <N> tok/s | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=<N>;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=3;;;0",
         runs=2),
    Case("busy-too-soon-to-compare", "stuck", ("--min-gap", "30"), OK,
         "VLLM OK - busy: 2 running, 2 waiting (verdict of <N> s ago repeated: too soon to compare) | "
         "kv_cache_usage=50%;;;0;100 prompt_tokens_per_second=U;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=2;;;0",
         runs=2),
    # --- stalling, stuck -------------------------------------------------------------------------------------
    Case("stalling", "stuck", ("--stuck-seconds", "0"), WARNING,
         "VLLM WARNING - stalling: no progress for <N> s over 1 reading (stuck at 2 readings and 0.0 s); "
         "2 running, 2 waiting | "
         "kv_cache_usage=50%;;;0;100 prompt_tokens_per_second=0;;;0 running=2;;;0 stalled_seconds=<N>s;;;0 "
         "steps_per_second=0;;;0 tokens_per_second=0;;;0 waiting=2;;;0"),
    Case("stuck-readings", "stuck", ("--stuck-seconds", "0"), CRITICAL,
         "VLLM CRITICAL - stuck: no progress for <N> s over 2 readings; 2 running, 2 waiting | "
         "kv_cache_usage=50%;;;0;100 prompt_tokens_per_second=0;;;0 running=2;;;0 stalled_seconds=<N>s;;;0 "
         "steps_per_second=0;;;0 tokens_per_second=0;;;0 waiting=2;;;0",
         runs=2),
    # --- quiet on purpose (issue 29): the server explains the stall ------------------------------------------
    Case("paused", "paused", ("--stuck-seconds", "0"), OK,
         "VLLM OK - paused: its server says the engine is paused (GET /is_paused) for <N> s; 2 running, 2 waiting | "
         "kv_cache_usage=50%;;;0;100 prompt_tokens_per_second=0;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=0;;;0 tokens_per_second=0;;;0 waiting=2;;;0",
         runs=2),
    Case("kv-transfer", "kv_deferred", ("--stuck-seconds", "0"), WARNING,
         "VLLM WARNING - kv transfer: every waiting request is deferred (vLLM's transient constraints: a KV transfer "
         "from a prefill instance, a LoRA budget, a blocked status such as a structured-output grammar compiling); "
         "probe answered in <N> s: the engine lives, its waiting work waits on that; 0 running, 2 waiting | "
         "kv_cache_usage=0%;;;0;100 probe_seconds=<N>s;;;0 prompt_tokens_per_second=0;;;0 running=0;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=0;;;0 tokens_per_second=0;;;0 waiting=2;;;0",
         runs=2),
    # The second reading races the simulator noticing that the timed-out probe hung up (it looks every 50 ms):
    # usually the abandoned probe still counts as 1 waiting, rarely it is gone already. Both lines are literal.
    # An unanswered idle probe needs the same proof as any stuck (issue 12): WARNING first, CRITICAL over readings.
    Case("stalling-probe-unanswered", "hung_idle", ("--probe-timeout", "1.5"), WARNING, tuple(
        "VLLM WARNING - stalling: no progress while a 1-token probe went unanswered "
        "(POST /v1/completions timed out after 1.5 s), for <N> s over 1 reading (stuck at 2 readings and 120 s); "
        f"0 running, {waiting} waiting | "
        "kv_cache_usage=0%;;;0;100 probe_seconds=<N>s;;;0 prompt_tokens_per_second=U;;;0 running=0;;;0 "
        f"stalled_seconds=<N>s;;;0 steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting={waiting};;;0"
        for waiting in (1, 0))),
    Case("stuck-probe-unanswered", "hung_idle", ("--probe-timeout", "1.5", "--stuck-seconds", "0"), CRITICAL, tuple(
        "VLLM CRITICAL - stuck: no progress while a 1-token probe went unanswered "
        f"(POST /v1/completions timed out after 1.5 s), for <N> s over 2 readings; 0 running, {waiting} waiting | "
        "kv_cache_usage=0%;;;0;100 probe_seconds=<N>s;;;0 prompt_tokens_per_second=U;;;0 running=0;;;0 "
        f"stalled_seconds=<N>s;;;0 steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting={waiting};;;0"
        for waiting in (1, 0)), runs=2),
    # --- idle, sleeping, restarted ---------------------------------------------------------------------------
    Case("idle-probe-answered", "idle", (), OK,
         "VLLM OK - idle: probe answered in <N> s | "
         "kv_cache_usage=0%;;;0;100 probe_seconds=<N>s;;;0 prompt_tokens_per_second=U;;;0 running=0;;;0 "
         "stalled_seconds=0s;;;0 steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=0;;;0"),
    Case("idle-no-probe", "idle", ("--no-probe",), OK,
         "VLLM OK - idle: no work, not probed | "
         "kv_cache_usage=0%;;;0;100 prompt_tokens_per_second=U;;;0 running=0;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=0;;;0"),
    Case("restarted-busy", "busy", (), OK,
         "VLLM OK - restarted: new process <N> s ago (at <HH:MM:SS>): process start time changed, new baseline; "
         "2 running, 3 waiting | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=U;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=3;;;0",
         runs=2, before_last="restart"),
    Case("restarted-idle-probed", "idle", (), OK,
         "VLLM OK - restarted: new process <N> s ago (at <HH:MM:SS>): process start time changed, new baseline; "
         "0 running, 0 waiting; probe answered in <N> s | "
         "kv_cache_usage=0%;;;0;100 probe_seconds=<N>s;;;0 prompt_tokens_per_second=U;;;0 running=0;;;0 "
         "stalled_seconds=0s;;;0 steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=0;;;0",
         runs=2, before_last="restart"),
    Case("sleeping", "sleeping", (), OK,
         "VLLM OK - sleeping: engine asleep, not probed | "
         "kv_cache_usage=0%;;;0;100 prompt_tokens_per_second=U;;;0 running=0;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=0;;;0"),
    # --- no reading ------------------------------------------------------------------------------------------
    Case("down", "dead", (), CRITICAL,
         "VLLM CRITICAL - down: connection refused ({url}) | " + _NO_READING),
    Case("starting", "dead", (), WARNING,
         "VLLM WARNING - starting: restarted <N> s ago, not serving yet (connection refused ({url})) | "
         + _NO_READING,
         runs=2, before_last="handle"),
    # the simulator's process (this one) served, then closed its listener and lives on: vLLM's graceful stop
    Case("stopping", "idle", ("--pid-command", "echo {server_pid}"), WARNING,
         "VLLM WARNING - stopping: vLLM process {server_pid} (from its pid command) served and still lives, "
         "refusing for 0.0 s (grace 120 s; connection refused ({url})) | " + _NO_READING,
         runs=2, before_last="stop"),
    # ...then exited, and nothing has started in its place yet: a restart between its stop and its start
    Case("stopping-exited", "idle", ("--pid-file", "{pid_file}"), WARNING, tuple(
        f"VLLM WARNING - stopping: server process {{server_pid}} served, stopped and exited, no new process yet; "
        f"refusing for {span} (grace 120 s; connection refused ({{url}})) | " + _NO_READING
        for span in ("<N> s", "0.0 s")),
         runs=2, before_last="stop_exit"),
    Case("unresponsive-http-500", "http_500", (), WARNING,
         "VLLM WARNING - unresponsive: /metrics answered HTTP 500 (for 0.0 s, 1 reading in a row) | "
         "kv_cache_usage=U;;;0;100 prompt_tokens_per_second=U;;;0 running=U;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=U;;;0"),
    Case("unresponsive-http-500-critical", "http_500", ("--stuck-seconds", "0"), CRITICAL,
         "VLLM CRITICAL - unresponsive: /metrics answered HTTP 500 (for <N> s, 2 readings in a row) | "
         "kv_cache_usage=U;;;0;100 prompt_tokens_per_second=U;;;0 running=U;;;0 stalled_seconds=<N>s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=U;;;0",
         runs=2),
    # -t 3: the run's deadline is 2 s, so the read gets what is left of it and the alarm is 1 s away still.
    Case("unresponsive-slow", "slow", ("-t", "3"), WARNING,
         "VLLM WARNING - unresponsive: GET /metrics timed out after <N> s (for 0.0 s, 1 reading in a row) | "
         "kv_cache_usage=U;;;0;100 prompt_tokens_per_second=U;;;0 running=U;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=U;;;0",
         sim={"slow_seconds": 20}),
    # A peer that does not speak HTTP answers at once: not a busy event loop, never restartable (issue 22).
    Case("protocol-not-http", "not_http", (), 3,
         "VLLM UNKNOWN - protocol: GET /metrics: connection reset at once, no HTTP answer ({url}): the server does not speak HTTP as asked (an https port behind "
         "an http:// URL? a header too long?); a restart would not help | " + _NO_READING),
    Case("no-metrics-404", "no_metrics", (), WARNING,
         "VLLM WARNING - no metrics: /metrics answered HTTP 404; /v1/models lists tiny-llama | " + _NO_READING),
    Case("no-metrics-html", "html", (), WARNING,
         "VLLM WARNING - no metrics: /metrics is not vLLM's (no vllm: metrics on the page; text/html, 140 bytes); "
         "/v1/models lists tiny-llama | " + _NO_READING),
    Case("proxy", "busy", ("--proxy",), OK,
         "VLLM OK - proxy: /v1/models lists tiny-llama | " + _NO_READING),
    Case("proxy-down", "dead", ("--proxy",), CRITICAL,
         "VLLM CRITICAL - proxy: /v1/models failed: connection refused ({url}) | " + _NO_READING),
    # --- data parallel ---------------------------------------------------------------------------------------
    Case("dp-one-frozen-stalling", "dp_one_frozen", ("--stuck-seconds", "0"), WARNING,
         "VLLM WARNING - stalling: engine 1 with 2 running, 2 waiting: no progress for <N> s over 1 reading "
         "(stuck at 2 readings and 0.0 s); engine 0 busy; total 4 running, 5 waiting | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=<N>;;;0 running=4;;;0 stalled_seconds=<N>s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=5;;;0",
         sim={"engines": 2}),
    Case("dp-one-frozen-stuck", "dp_one_frozen", ("--stuck-seconds", "0"), CRITICAL,
         "VLLM CRITICAL - stuck: engine 1 with 2 running, 2 waiting: no progress for <N> s over 2 readings; "
         "engine 0 busy; total 4 running, 5 waiting | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=<N>;;;0 running=4;;;0 stalled_seconds=<N>s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=5;;;0",
         runs=2, sim={"engines": 2}),
    # --- thresholds: a breach is appended after the verdict, and its range goes into the perfdata -------------
    Case("busy-waiting-warning", "busy", ("-w", "2"), WARNING,
         "VLLM WARNING - busy: 2 running, 3 waiting, <N> tok/s; waiting 3 outside range 0:2 | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=<N>;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=3;2;;0",
         runs=2),
    Case("busy-waiting-critical", "busy", ("-w", "2", "-c", "2"), CRITICAL,
         "VLLM CRITICAL - busy: 2 running, 3 waiting, <N> tok/s; waiting 3 outside range 0:2 | "
         "kv_cache_usage=<N>%;;;0;100 prompt_tokens_per_second=<N>;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=3;2;2;0",
         runs=2),
    Case("busy-kv-warning", "busy", ("--kv-warning", "20"), WARNING,
         "VLLM WARNING - busy: 2 running, 3 waiting, <N> tok/s; kv_cache_usage <N>% outside range 0:20 | "
         "kv_cache_usage=<N>%;20;;0;100 prompt_tokens_per_second=<N>;;;0 running=2;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=<N>;;;0 tokens_per_second=<N>;;;0 waiting=3;;;0",
         runs=2),
    Case("stalling-kv-warning", "stuck", ("--kv-warning", "40", "--stuck-seconds", "0"), WARNING,
         "VLLM WARNING - stalling: no progress for <N> s over 1 reading (stuck at 2 readings and 0.0 s); "
         "2 running, 2 waiting; kv_cache_usage 50% outside range 0:40 | "
         "kv_cache_usage=50%;40;;0;100 prompt_tokens_per_second=0;;;0 running=2;;;0 stalled_seconds=<N>s;;;0 "
         "steps_per_second=0;;;0 tokens_per_second=0;;;0 waiting=2;;;0"),
    Case("idle-kv-below-range", "idle", ("--kv-warning", "10:", "--no-probe"), WARNING,
         "VLLM WARNING - idle: no work, not probed; kv_cache_usage 0% outside range 10: | "
         "kv_cache_usage=0%;10:;;0;100 prompt_tokens_per_second=U;;;0 running=0;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=0;;;0"),
    # --- the state file --------------------------------------------------------------------------------------
    Case("state-not-saved", "idle", ("--no-probe",), WARNING,
         "VLLM WARNING - idle: no work, not probed; state not saved: cannot open state lock in {state}: "
         "Permission denied; judged on this run alone (a stall cannot be proven across runs) | "
         "kv_cache_usage=0%;;;0;100 prompt_tokens_per_second=U;;;0 running=0;;;0 stalled_seconds=0s;;;0 "
         "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=0;;;0",
         read_only_state=True),
]


# --------------------------------------------------------------------------- running a case


def _restart_handler(sim: Simulator, state: Path) -> None:
    """Let check_vllm_restart act on the check's CRITICAL verdict, so it writes its restart marker itself."""
    done = run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--url", sim.url,
                      "--state-dir", str(state), "--", sys.executable, "-c", "pass")
    assert done.code == 0 and ": restarted: " in done.out, done


def _older_baseline(sim: Simulator, state: Path) -> None:
    """Make the saved baseline a process younger than the one now serving: behind one URL, readings of two
    processes in turn (a load balancer), not a restart."""
    from check_vllm.memory.statefile import check_file

    store = check_file(state, sim.url, False)
    data, problem = store.load()
    assert problem is None and data["reading"]["process_start"], (problem, data)
    data["reading"]["process_start"] += 100.0
    store.save(data)


def _pid_file(state: Path) -> Path:
    """The pid file of the stopping-exited case: this process, the simulator's, until it "exits"."""
    return state.parent / "vllm.pid"


def _stop_then_exit(sim: Simulator, state: Path) -> None:
    """The server closes its listener (one check sees it stopping), then its process goes: the pid file
    is removed, as a supervisor does when the process exits."""
    sim.set_scenario("dead")
    seen = run_check(state, "-u", sim.url, *COMMON, "--pid-file", str(_pid_file(state)))
    assert "stopping: " in seen.out, seen.out + seen.err
    _pid_file(state).unlink()


BEFORE_LAST: dict[str, Callable[[Simulator, Path], None]] = {
    "restart": lambda sim, state: sim.restart(),
    "handle": _restart_handler,
    "older": _older_baseline,
    "stop": lambda sim, state: sim.set_scenario("dead"),
    "stop_exit": _stop_then_exit,
}


def _read_only(state: Path) -> tuple[str, ...]:
    """Make `state` a directory nobody may create files in; the prefix that makes root obey it too."""
    if AS_ORDINARY_USER:
        if not shutil.which("setpriv") or subprocess.run([*AS_ORDINARY_USER, "true"], capture_output=True).returncode:
            pytest.fail("running as root without a working setpriv: root writes into any directory", pytrace=False)
    state.mkdir(parents=True)
    state.chmod(0o555)
    return AS_ORDINARY_USER


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_status_line(case: Case, tmp_path: Path):
    state = tmp_path / "state"
    with Simulator(scenario=case.scenario, **case.sim) as sim:
        prefix = _read_only(state) if case.read_only_state else ()
        _pid_file(state).write_text(f"{os.getpid()}\n")
        try:
            for run in range(case.runs):
                if run:
                    time.sleep(GAP)
                if run == case.runs - 1 and case.before_last:
                    BEFORE_LAST[case.before_last](sim, state)
                args = [a.replace("{server_pid}", str(os.getpid())).replace("{pid_file}", str(_pid_file(state)))
                        for a in case.args]
                r = run_check(state, "-u", sim.url, *COMMON, *args, prefix=prefix)
        finally:
            if case.read_only_state:
                state.chmod(0o755)
        url = sim.url
    first = r.first
    got = normalise(first)
    allowed = case.line if isinstance(case.line, tuple) else (case.line,)
    expected = [line.replace("{url}", url).replace("{state}", str(state)).replace("{server_pid}", str(os.getpid()))
                for line in allowed]
    assert got in expected, f"\n got: {got}\nwant: {expected[0]}\n raw: {first}\nstderr: {r.err}"
    assert r.code == case.code, (r.code, first, r.err)


def test_every_verdict_word_is_pinned():
    """A new verdict word needs a golden row here: the words are the contract's table, which --help lists."""
    help_text = subprocess.run([CHECK, "--help"], capture_output=True, text=True, timeout=60).stdout
    table = help_text.split("verdicts (first word of the status text):", 1)[1].split("\n\n", 1)[0]
    listed = {m.group(1) for m in re.finditer(r"^  (\w+(?: \w+)?)\s{2,}(?:OK|WARN|CRIT|UNKNOWN)", table, re.M)}
    assert listed == set(WORDS), (sorted(listed), WORDS)
    lines = [line for c in CASES for line in (c.line if isinstance(c.line, tuple) else (c.line,))]
    pinned = {line.split(" - ", 1)[1].split(":", 1)[0] for line in lines}
    assert set(WORDS) <= pinned, sorted(set(WORDS) - pinned)
