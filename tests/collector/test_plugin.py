"""The collector against the simulator over real HTTP: golden protocol text, stuck, probing policy, bounds."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest

from check_vllm.contract.vocab import BY_WORD, CRITICAL, OK, UNKNOWN, WARNING, WORDS
from check_vllm.netdata import alarms as health
from check_vllm.netdata import charts
from check_vllm.netdata.collector import JobCollector, Output, run_job
from check_vllm.netdata.config import Job

from .conftest import Clock, masked

GOLDEN = Path(__file__).parent / "golden"


def collector(job: Job, clock: Clock) -> JobCollector:
    return JobCollector(job, wall=clock.wall, mono=clock.mono, say=lambda message: None)


def sets(text: str, chart: str) -> dict[str, int]:
    """The SET values of one chart's block in a tick's text."""
    out: dict[str, int] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("BEGIN "):
            inside = line.split()[1] == chart
        elif inside and line.startswith("SET "):
            _, dim, _, value = line.split()
            out[dim] = int(value)
    return out


def word(text: str, job: str = "t") -> str:
    on = [dim for dim, value in sets(text, f"vllm_{job}.state").items() if value]
    assert len(on) == 1, text
    return on[0]


def test_first_and_steady_ticks_match_the_golden_protocol_text(make_sim, clock):
    sim = make_sim(scenario="busy")
    c = collector(Job("t", sim.url), clock)
    first = c.tick()
    clock.advance(1.0)
    time.sleep(0.02)  # let the simulator's counters move
    steady = c.tick()
    assert masked(first) == (GOLDEN / "first_tick.txt").read_text()
    assert masked(steady) == (GOLDEN / "steady_tick.txt").read_text()
    assert sim.inference_requests() == []  # busy: never a probe


def test_every_verdict_word_has_a_state_dimension():
    state = next(c for c in charts.CHARTS if c.id == "state")
    assert [d.name for d in state.dims] == list(WORDS)
    assert all(" " not in d.id for d in state.dims)


def test_a_frozen_engine_drives_the_state_chart_to_stuck(make_sim, clock):
    sim = make_sim(scenario="busy")
    c = collector(Job("t", sim.url, stuck_readings=2, stuck_seconds=3), clock)
    c.tick()
    sim.set_scenario("stuck")
    seen = []
    for _ in range(6):
        clock.advance(1.0)
        text = c.tick()
        seen.append((word(text), sets(text, "vllm_t.stalled")["stalled"]))
    assert [w for w, _ in seen] == ["busy", "stalling", "stalling", "stuck", "stuck", "stuck"]
    assert [s for _, s in seen[1:]] == [1000, 2000, 3000, 4000, 5000]
    assert sim.inference_requests() == []  # work present: never probed


def test_idle_is_probed_at_most_once_per_probe_every(make_sim, clock):
    sim = make_sim(scenario="idle")
    c = collector(Job("t", sim.url, idle_completion_every=60), clock)
    probes = []
    for _ in range(5):
        text = c.tick()
        probes.append("latency" in sets(text, "vllm_t.probe"))
        assert word(text) == "idle"
        clock.advance(1.0)
    assert probes == [True, False, False, False, False]
    clock.advance(60.0)
    assert "latency" in sets(c.tick(), "vllm_t.probe")
    assert len(sim.inference_requests()) == 2


def test_probe_off_sends_no_inference_request_and_has_no_probe_chart(make_sim, clock):
    sim = make_sim(scenario="idle")
    c = collector(Job("t", sim.url, idle_completion=False), clock)
    text = c.tick()
    assert "vllm_t.probe" not in text and word(text) == "idle"
    assert sim.inference_requests() == []


def test_a_down_server_is_a_chart_value(clock):
    c = collector(Job("t", "http://127.0.0.1:9"), clock)
    text = c.tick()
    assert word(text) == "down"
    assert "vllm_t.requests" in text.split("BEGIN")[0]  # charts defined even before any reading


def test_per_engine_dimensions_are_bounded(make_sim, clock, monkeypatch):
    monkeypatch.setattr(charts, "MAX_ENGINES", 2)
    told = []
    sim = make_sim(scenario="busy", engines=3)
    c = JobCollector(Job("t", sim.url), wall=clock.wall, mono=clock.mono, say=told.append)
    text = c.tick()
    requests = sets(text, "vllm_t.requests")
    assert requests == {"running": 6, "waiting": 9, "running_engine_0": 2, "waiting_engine_0": 3,
                        "running_engine_1": 2, "waiting_engine_1": 3}
    assert "DIMENSION steps_engine_1 'engine 1 steps' incremental 1 1 ''" in text
    assert "engine_2" not in text and len(told) == 1
    clock.advance(1.0)
    assert "CHART" not in c.tick()  # nothing new: no redefinition


def test_one_engine_of_several_frozen_is_stuck(make_sim, clock):
    sim = make_sim(scenario="dp_one_frozen", engines=2)
    c = collector(Job("t", sim.url, stuck_seconds=2), clock)
    for _ in range(4):
        text = c.tick()
        clock.advance(1.0)
        time.sleep(0.02)
    assert word(text) == "stuck"


def test_a_slow_server_does_not_delay_another_jobs_ticks(make_sim):
    slow = make_sim(scenario="slow", slow_seconds=3.0)
    busy = make_sim(scenario="busy")
    buf = io.StringIO()
    out, stop = Output(buf), threading.Event()
    jobs = [Job("slow", slow.url, timeout=2.5), Job("busy", busy.url)]
    threads = [threading.Thread(target=run_job, args=(JobCollector(j, say=lambda m: None), out, stop), daemon=True)
               for j in jobs]
    for t in threads:
        t.start()
    time.sleep(2.2)
    stop.set()
    text = buf.getvalue()
    assert text.count("BEGIN vllm_busy.state") >= 3  # one per second, from the start
    assert "BEGIN vllm_slow.state" not in text  # still waiting for its first answer


def test_a_closed_pipe_stops_the_job_threads(make_sim):
    sim = make_sim(scenario="busy")

    class Closed(io.StringIO):
        def write(self, s: str) -> int:
            raise BrokenPipeError

    stop = threading.Event()
    t = threading.Thread(target=run_job, args=(JobCollector(Job("t", sim.url)), Output(Closed()), stop), daemon=True)
    t.start()
    t.join(5)
    assert stop.is_set() and not t.is_alive()


@pytest.mark.parametrize("proxy", [True])
def test_proxy_mode_only_reads_v1_models(make_sim, clock, proxy):
    sim = make_sim(scenario="busy")
    text = collector(Job("t", sim.url, proxy=proxy), clock).tick()
    assert word(text) == "proxy"
    assert {r.path for r in sim.requests()} == {"/v1/models"}
    assert "vllm_t.requests" not in text


def test_a_wedged_idle_engine_stays_stalling_then_stuck_between_probes(make_sim, clock):
    """Issue 22 item 8: the ticks between probes keep the unanswered probe's word, so vllm_stuck does not flap."""
    sim = make_sim(scenario="hung_idle")
    c = collector(Job("t", sim.url, stuck_readings=2, stuck_seconds=3, idle_completion_every=3, idle_completion_timeout=0.3), clock)
    seen = []
    for _ in range(7):
        seen.append(word(c.tick()))
        clock.advance(1.0)
        time.sleep(0.3)  # let the simulator drop the abandoned probe: work in sight would be judged as work
    assert seen == ["stalling", "stalling", "stalling", "stuck", "stuck", "stuck", "stuck"]
    assert c.probes_sent == 3
    sim.set_scenario("idle")  # the engine answers again: the next probe ends it
    after = []
    for _ in range(3):
        after.append(word(c.tick()))
        clock.advance(1.0)
    assert after == ["stuck", "stuck", "idle"]


def alarms() -> dict[str, dict[str, str]]:
    """The shipped health.d/vllm.conf: template -> its lines (key: value)."""
    out: dict[str, dict[str, str]] = {}
    text = (Path(__file__).resolve().parents[2] / "contrib/netdata/health.d/vllm.conf").read_text()
    current: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line and not line.lstrip().startswith("#"):
            key, value = (part.strip() for part in line.split(":", 1))
            if key == "template":
                current = out.setdefault(value, {})
            current[key] = value
    return out


def _holds(expression: str, value: float) -> bool:
    """A health.d expression of comparisons of $this, AND, OR and parentheses, at $this = value."""
    assert set(expression.replace("$this", "").replace("AND", "").replace("OR", "")) <= set("0123456789.<>=() "), \
        expression
    return bool(eval(expression.replace("$this", repr(value)).replace("AND", "and").replace("OR", "or")))  # noqa: S307


def test_every_verdict_word_has_an_alarm_or_a_reason_and_alarms_match_its_states():
    """Issues 17 (part 4), 18 and 52: the contract's table against the shipped alarms. Every word is alarmed at its
    WARNING or UNKNOWN or listed quiet there with why (`starting` is never an alarm); every word that can be
    CRITICAL is alarmed CRITICAL exactly at its CRITICAL, WARNING only at a WARNING or UNKNOWN (a Netdata alarm has
    no UNKNOWN): the template tests the value the collector charts for that state, never the word alone."""
    state = {spec["lookup"].split(" of ")[-1]: spec for spec in alarms().values() if spec["on"] == "vllm.state"}
    ids = {charts.word_id(w): w for w in WORDS}
    assert set(state) <= set(ids), set(state) - set(ids)
    assert [spec["template"] for spec in state.values()] == list(health.NAMES)
    for dim, spec in state.items():
        word = ids[dim]
        states = BY_WORD[word].states
        want = {level: {charts.state_value(s) for s in states if s in at}
                for level, at in (("crit", (CRITICAL,)), ("warn", (WARNING, UNKNOWN) if word not in health.QUIET
                                                          else ()))}
        # which values each level's expression holds for: the charted states', and within half a step of them
        # (Netdata interpolates a step from 2 to 3 through the values between)
        holds = {level: {v for v in (0, 1, 2, 3, 4) if level in spec and _holds(spec[level], v)} for level in want}
        assert holds == want, (word, spec)
        assert all(_holds(spec[level], v + 0.3) and _holds(spec[level], v - 0.3) for level in want for v in want[level])
        assert spec["template"] == f"vllm_{dim}" and ("crit" in spec or "warn" in spec), spec
    for word in WORDS:
        row = BY_WORD[word]
        alarmed = charts.word_id(word) in state
        assert alarmed is any(s != OK and (s == CRITICAL or word not in health.QUIET) for s in row.states), word
        assert word not in health.QUIET or any(s in (WARNING, UNKNOWN) for s in row.states), word


def test_the_state_chart_carries_the_state_so_unresponsive_critical_raises_critical():
    """The current word's dimension is 1 + its state: the alarm on `unresponsive` tells its CRITICAL (3) from its
    WARNING (2); an OK word is 1, every other 0 (issue 52: it was 1 at both states, the alarm WARNING at both)."""
    from check_vllm.contract.kept import Memory
    from check_vllm.contract.verdict import Verdict

    job = Job("t", "http://127.0.0.1:1")
    for code, value, raised in ((WARNING, 2, ("vllm_unresponsive", health.WARN)),
                                (CRITICAL, 3, ("vllm_unresponsive", health.CRIT))):
        values = charts.collect(job, Verdict("unresponsive", code, "", Memory()), None, (), None)["state"]
        assert {d: v for d, v in values.items() if v} == {"unresponsive": value}
        assert health.raised("unresponsive", value) == raised
    busy = charts.collect(job, Verdict("busy", OK, "", Memory()), None, (), None)["state"]
    assert {d: v for d, v in busy.items() if v} == {"busy": 1} and health.raised("busy", 1) is None


def test_sglang_busy_then_frozen_is_told_by_counters_and_the_probe_never_by_its_lagging_gauges(make_sim, clock):
    """The Netdata collector judges SGLang by its row as the check does (issue 40): busy by its counters with no
    inference request; frozen with its gauges still showing work, the idle probe goes (at most once per
    probe_every), is not answered, and with nothing moving the state becomes stuck; /health, a generation on
    SGLang, is never asked."""
    from vllm_simulator.sglang_engine import SglangOptions

    sim = make_sim(port=0, flavour="sglang", sglang=SglangOptions(health_poll_seconds=0.05), scenario="busy")
    c = collector(Job("t", sim.url, stuck_readings=2, stuck_seconds=3, idle_completion_every=1, idle_completion_timeout=0.5,
                      engine="sglang"), clock)
    c.tick()
    time.sleep(0.3)
    clock.advance(1.0)
    assert word(c.tick()) == "busy"
    assert sim.inference_requests() == []
    sim.set_scenario("stuck")
    seen = []
    for _ in range(8):
        clock.advance(1.0)
        seen.append(word(c.tick()))
    assert "stuck" in seen and seen[-1] == "stuck", seen
    assert sim.inference_requests(), "the probe told hung from idle"
    assert not any(r.path in ("/health", "/health_generate") for r in sim.requests())
