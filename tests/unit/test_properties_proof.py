"""Property: CRITICAL only if the frozen condition held over --stuck-readings comparisons spanning
--stuck-seconds of REAL elapsed time, or nothing listens (issue 14).

Random histories of one engine fed through the judge as the check feeds it, on two clocks: real time
(the boot-time clock the Instants carry) and a wall clock that steps by hours now and then. Pages are
sometimes cut (counter families missing, the gauges left), probes answer, time out, time out but get
served late (the engine did the probe's work), or meet a dead engine. The oracle knows when the engine
really last did anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import (
    ANSWERED,
    ENGINE_DEAD,
    NO_ANSWER,
    EngineReading,
    Evidence,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.vocab import CONFIRM, CRITICAL
from check_vllm.judge.assess import assess
from check_vllm.judge.idle_completion import after_probe, probe_failure
from check_vllm.judge.no_reading import assess_failure
from check_vllm.memory import codec

BOOT = "boot-1"
EVENTS = ("progress", "none", "none", "none", "cut page", "work arrives", "work leaves", "wall step")
PROBES = ("answered", "no answer", "no answer", "served late", "engine dead")


@dataclass
class Engine:
    steps: float = 1000.0
    gen: float = 5000.0
    finished: float = 100.0
    running: int = 0
    waiting: int = 0
    moved_at: float = 0.0  # real time of the last work the engine really did
    moved_run: int = 0

    def page(self, cut: bool) -> Reading:
        if cut:  # a body cut short: counter families gone, the gauges left
            e = EngineReading(running=self.running, waiting=self.waiting, kv_cache=0.25)
        else:
            e = EngineReading(running=self.running, waiting=self.waiting, steps=self.steps, step_tokens=self.steps * 8,
                              generation_tokens=self.gen, prompt_tokens=self.gen * 2, finished=self.finished,
                              kv_cache=0.25)
        return Reading(engines={"0": e}, process_start=1000.0, model="m")

    def work(self, t: float, run: int, steps: float = 40.0) -> None:
        self.steps += steps
        self.gen += steps
        self.finished += 1
        self.moved_at, self.moved_run = t, run


run_st = st.tuples(st.floats(0.5, 200.0), st.sampled_from(EVENTS), st.sampled_from(PROBES), st.booleans())
cfg_st = st.builds(Settings, stuck_readings=st.integers(1, 3), stuck_seconds=st.sampled_from([0.0, 30.0, 300.0]),
                   min_gap=st.sampled_from([0.0, 2.0]), max_age=st.just(3600.0))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=cfg_st, runs=st.lists(run_st, min_size=1, max_size=25))
# found by chance (a red suite on 2026-12-07): a stall proven on gauges alone (two pages cut short), then a whole
# page whose counters moved: the counters cannot be compared with the gauges-only baseline, and 'stuck' stood
@example(cfg=Settings(stuck_readings=1, stuck_seconds=30.0, min_gap=0.0, max_age=3600.0),
         runs=[(1.0, "work arrives", "answered", False), (1.0, "cut page", "answered", True),
               (30.0, "cut page", "answered", True), (1.0, "progress", "answered", False)])
@example(  # the counters back after the cut pages had moved: the stall kept from the gauges' proof made the next
    # full page CRITICAL "no progress for 300 s" 85 s after that progress
    cfg=Settings(stuck_readings=1, stuck_seconds=300.0, min_gap=0.0, max_age=3600.0),
    runs=[(1.0, "work arrives", "answered", False), (1.0, "cut page", "answered", True),
          (59.0, "cut page", "answered", True), (156.0, "progress", "answered", False), (85.0, "none", "answered", False)])
def test_critical_only_after_real_proof(cfg, runs):
    eng, memory = Engine(), Memory()
    t, offset = 0.0, 1_700_000_000.0
    for i, (dt, event, probe, cut) in enumerate(runs, start=1):
        t += dt
        if event == "wall step":
            offset += 7200.0 if i % 2 else -9000.0
        elif event == "progress":
            eng.work(t, i)
        elif event == "work arrives":
            eng.running, eng.waiting = 2, 3
        elif event == "work leaves":
            eng.running = eng.waiting = 0
        cut_page = cut and event == "cut page"
        now = Instant(t + offset, t, BOOT)
        v = assess(memory, eng.page(cut_page), cfg, now)
        final = v
        if v.action == "probe":
            kind, reread = probe, None
            if probe == "served late":  # timed out at our end, but the engine did the probe's work
                eng.work(t + 10, i, steps=2.0)
                kind = NO_ANSWER
            outcome = ProbeOutcome({"answered": ANSWERED, "engine dead": ENGINE_DEAD}.get(kind, NO_ANSWER), 10.0,
                                   "x", prompt_tokens=2, completion_tokens=1)
            later = Instant(t + 10 + offset, t + 10, BOOT)
            failed = probe_failure(outcome)  # as observe() does: the engine's death is a run without a reading
            final = assess_failure(v.memory, Evidence(failed), cfg, later) if failed else \
                after_probe(v, outcome, None, cfg, later)
            if final.action == CONFIRM:
                reread = eng.page(cut_page)
                final = after_probe(v, outcome, reread, cfg, later)
            t += 10  # the run took the probe's time: the next one starts after it
            if outcome.kind == ENGINE_DEAD:
                assert (final.word, final.code) == ("down", CRITICAL), final.summary
                memory = final.memory
                continue
        if final.code == CRITICAL:
            assert final.word == "stuck", final.summary
            real = t - eng.moved_at
            assert real >= cfg.stuck_seconds, (real, cfg, final.summary)
            assert i - eng.moved_run >= cfg.stuck_readings - 1, (i, eng.moved_run, cfg, final.summary)
        memory = codec.from_json(codec.to_json(final.memory))
