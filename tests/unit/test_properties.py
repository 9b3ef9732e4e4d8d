"""Property tests of the pure layer: random sequences of readings, time steps (clock jumps included),
restarts and probe outcomes, fed through verdict.assess / after_probe exactly as the check does.

What must hold whatever the sequence:
- stuck from a reading only with work present on that engine, and with no progress signal moved on it
  over at least --stuck-readings steps spanning at least --stuck-seconds;
- stuck from a probe only when the probe really went unanswered and a re-read showed no progress;
- counters of two processes are never compared: a restart step yields no rate and no stall;
- idle (OK) only after a successful probe, or as the repeat of such a verdict within --min-gap;
- the state stays strict JSON (the state file refuses NaN) and nothing raises.
And the metrics parser only ever raises NotMetrics, whatever text it is given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import (
    ANSWERED,
    CUT_SHORT,
    NO_ANSWER,
    REFUSED,
    REJECTED,
    EngineReading,
    Evidence,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.vocab import CRITICAL, OK
from check_vllm.judge.assess import assess
from check_vllm.judge.idle_completion import after_probe, probe_failure
from check_vllm.judge.no_reading import assess_failure
from check_vllm.memory import codec
from check_vllm.server.reading import NotMetrics, parse

ACTIONS = ("progress", "kv", "none", "none", "none", "restart")
PROBES = ("ok", "no answer, no progress", "no answer, progress", "rejected", "refused", "cut short")


@dataclass
class Engine:
    steps: float = 1000.0
    gen: float = 5000.0
    prompt: float = 9000.0
    finished: float = 100.0
    kv: float = 0.3
    running: int = 0
    waiting: int = 0
    # oracle: when and at which step this engine last moved (or was born)
    moved_at: float = 0.0
    moved_step: int = 0

    def reading(self, created: float | None) -> EngineReading:
        return EngineReading(running=self.running, waiting=self.waiting, steps=self.steps,
                             step_tokens=self.steps * 10, generation_tokens=self.gen, prompt_tokens=self.prompt,
                             finished=self.finished, kv_cache=self.kv, preemptions=0.0, created=created)


@dataclass
class World:
    engines: dict[str, Engine] = field(default_factory=dict)
    start: float | None = 1_000.0
    created: float | None = 1_000.0

    def reading(self) -> Reading:
        return Reading(engines={n: e.reading(self.created) for n, e in self.engines.items()},
                       process_start=self.start, model="m")


step_st = st.tuples(
    st.one_of(st.floats(0.0, 400.0), st.sampled_from([-7200.0, -30.0, 0.5, 3000.0, 7200.0, 86400.0])),
    st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 3), st.integers(0, 3)), min_size=2, max_size=2),
    st.sampled_from(PROBES),
)
settings_st = st.builds(Settings, stuck_readings=st.integers(1, 4), stuck_seconds=st.sampled_from([0.0, 30.0, 120.0]),
                        min_gap=st.sampled_from([0.0, 2.0, 10.0]), max_age=st.sampled_from([600.0, 3600.0]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=settings_st, steps=st.lists(step_st, min_size=1, max_size=30),
       engines=st.sampled_from([1, 2]), identity=st.sampled_from(["start", "created", "counters"]))
@example(  # a repeat ended engine 0's stall (its work gone) and said busy OK; the next repeat, its work back,
    # re-read the older stuck verdict and said CRITICAL again with nothing compared in between
    cfg=Settings(stuck_readings=1, stuck_seconds=0.0, min_gap=2.0, max_age=600.0), engines=2, identity="start",
    steps=[(0.0, [("progress", 0, 0), ("progress", 0, 0)], "ok")] * 7 + [
        (2.0, [("none", 0, 1), ("progress", 0, 0)], "ok"), (0.0, [("none", 0, 0), ("none", 0, 1)], "ok"),
        (0.0, [("none", 0, 1), ("kv", 0, 0)], "ok")])
@example(  # an unanswered probe proved engine 0 stuck; the next run (its kv gauge moved, no work in sight) let
    # that stuck stand until its own probe: a standing word, not a stuck judged from the reading
    cfg=Settings(stuck_readings=1, stuck_seconds=0.0, min_gap=0.0, max_age=600.0), engines=1, identity="start",
    steps=[(0.0, [("progress", 0, 0), ("progress", 0, 0)], "ok")] * 7 + [
        (0.0, [("progress", 0, 0), ("progress", 0, 0)], "no answer, no progress"),
        (1.0, [("kv", 0, 0), ("progress", 0, 0)], "ok")])
def test_random_histories_keep_the_promises(cfg, steps, engines, identity):
    world = World(engines={str(i) if engines > 1 else "": Engine() for i in range(engines)},
                  start=1_000.0 if identity == "start" else None,
                  created=1_000.0 if identity == "created" else None)
    state = Memory()
    now = 1_000_000.0
    last_final = None
    for i, (dt, actions, probe_kind) in enumerate(steps, start=1):
        now += dt
        restarted = False
        for eng in world.engines.values():  # after a backwards clock jump, "then" is no later than "now"
            eng.moved_at = min(eng.moved_at, now)
        for (action, running, waiting), eng in zip(actions, world.engines.values(), strict=False):
            eng.running, eng.waiting = running, waiting
            if action == "progress":
                eng.steps += 50
                eng.gen += 200
                eng.prompt += 300
                eng.finished += 2
            elif action == "kv":
                eng.kv = 0.9 if eng.kv < 0.5 else 0.2
            if action == "restart":
                restarted = True
            if action != "none":
                eng.moved_at, eng.moved_step = now, i
        if restarted:  # a new process: every engine's counters start again, below where they were
            for eng in world.engines.values():
                eng.steps, eng.gen, eng.prompt, eng.finished = eng.steps / 2, eng.gen / 2, eng.prompt / 2, 0.0
                eng.moved_at, eng.moved_step = now, i
            world.start = world.start + 5000.0 if world.start is not None else None
            world.created = world.created + 5000.0 if world.created is not None else None

        reading = world.reading()
        v = assess(state, reading, cfg, now)

        # stuck from a reading: work present, nothing moved over enough steps and seconds
        for name, word in v.engines.items():
            if word == "stuck":
                eng = world.engines[name]
                if state.unanswered is not None and v.action == "probe" and "not probed again yet" in v.summary:
                    # idle, nothing counted since a probe went unanswered: that probe's stuck stands until this
                    # run's probe settles it (a gauge that moves while no work is in sight is no progress)
                    assert last_final == ("stuck", CRITICAL), (last_final, v.summary)
                    continue
                assert eng.running + eng.waiting > 0, (name, v.summary)
                if "repeated" in v.text:
                    # within --min-gap the last verdict stands (the baseline is kept): it must have been stuck,
                    # and a gauge that moved and came back in between is invisible to any reader of /metrics
                    assert last_final == ("stuck", CRITICAL), (last_final, v.summary)
                    continue
                assert i - eng.moved_step >= cfg.stuck_readings, (i, eng.moved_step, v.summary)
                assert now - eng.moved_at >= cfg.stuck_seconds, (now - eng.moved_at, v.summary)
        # a restart is never compared with the process before it
        if restarted:
            assert v.word in ("restarted", "busy", "idle", "sleeping"), v.summary
            assert v.tokens_per_second is None and v.steps_per_second is None, v.summary
            assert not v.memory.stalls, v.memory

        final = v
        if v.action == "probe":
            probe, reread = _probe(probe_kind, world, now)
            failed = probe_failure(probe)  # as observe() does: a refused probe is a run without a reading
            final = assess_failure(v.memory, Evidence(failed), cfg, now + 0.5) if failed else \
                after_probe(v, probe, reread, cfg, now + 0.5)
            if final.word == "stuck":
                assert probe_kind == "no answer, no progress", (probe_kind, final.summary)
            if final.word == "idle" and final.code == OK:
                assert probe.kind == ANSWERED, (probe_kind, final.summary)
        elif v.word == "idle" and v.code == OK:
            # idle without a probe: only the repeat of an idle OK verdict within --min-gap
            assert "repeated" in v.text and last_final == ("idle", OK), (last_final, v.summary)
        if final.code == CRITICAL:
            assert final.word == "stuck" or (final.word == "down" and probe_kind == "refused"), final.summary
        json.dumps(codec.to_json(final.memory), allow_nan=False)  # what the state file will write
        state = codec.from_json(codec.to_json(final.memory))  # through the state file's codec, as the check does
        last_final = (final.word, final.code)


def _probe(kind: str, world: World, now: float) -> tuple[ProbeOutcome, Reading | None]:
    if kind == "ok":
        return ProbeOutcome(ANSWERED, 0.05, prompt_tokens=3, completion_tokens=1), None
    if kind == "rejected":
        return ProbeOutcome(REJECTED, 0.01, "completion answered HTTP 401"), None
    if kind == "refused":
        return ProbeOutcome(REFUSED, 0.0, "connection refused"), None
    if kind == "cut short":
        return ProbeOutcome(CUT_SHORT, 1.0, "timed out"), world.reading()
    if kind == "no answer, progress":
        for eng in world.engines.values():
            eng.gen += 500
            eng.steps += 100
            eng.moved_at = now
        return ProbeOutcome(NO_ANSWER, 10.0, "timed out"), world.reading()
    return ProbeOutcome(NO_ANSWER, 10.0, "timed out"), world.reading()


# --------------------------------------------------------------------------- the parser

TOKENS = st.sampled_from([
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
    "vllm:iteration_tokens_total_count", "vllm:kv_cache_usage_perc", "vllm:request_success_total",
    "vllm:generation_tokens_created", "vllm:engine_sleep_state", "process_start_time_seconds", "# TYPE", "# HELP",
    "{", "}", '{engine="0"}', '{engine="1",model_name="m"}', '{sleep_state="awake",engine="0"}', "=", '"', ",",
    " ", "\t", "\n", "\r\n", "\\", "1", "-1", "0.5", "1e308", "1e400", "NaN", "+Inf", "-Inf", "# EOF", "\x00", "é",
    "\udcff", "# {trace_id=\"x\"} 1.0",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(TOKENS, max_size=40).map("".join))
@example('vllm:num_requests_running{engine="0"} +Inf\nvllm:num_requests_running{engine="1"} 2\n'
         'vllm:num_requests_waiting{engine="1"} 1e400\nvllm:generation_tokens_total{engine="1"} 5\n'
         'vllm:iteration_tokens_total_count{engine="1"} NaN\nvllm:generation_tokens_total{engine="0"} 1e308\n')
def test_parser_raises_only_not_metrics(text):
    """Whatever the page, every value a reading keeps is a real number a float counts in ones."""
    try:
        r = parse(text)
    except NotMetrics:
        return
    kept = [v for e in r.engines.values() for v in e._asdict().values() if v is not None]
    kept += [r.process_start] if r.process_start is not None else []
    for value in kept:
        assert math.isfinite(float(value)) and abs(float(value)) <= 2.0**53, (value, text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parser_on_any_text(text):
    try:
        parse(text)
    except NotMetrics:
        pass
