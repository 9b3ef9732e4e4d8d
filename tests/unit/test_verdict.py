"""The decision engine as tables: every verdict and the transitions between them, no I/O."""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import (
    ANSWERED,
    MODELS_OK,
    NO_ANSWER,
    REFUSED,
    REJECTED,
    EngineReading,
    Evidence,
    Failure,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.vocab import CRITICAL, DOWN, OK, UNKNOWN, UNRESPONSIVE, WARNING
from check_vllm.judge.assess import assess
from check_vllm.judge.idle_completion import after_probe, probe_failure
from check_vllm.judge.no_reading import assess_failure
from check_vllm.memory import codec

S = Settings(stuck_readings=2, stuck_seconds=120.0, min_gap=2.0, max_age=3600.0)
T0 = 1_700_000_000.0


def eng(running=0, waiting=0, steps=100.0, gen=1000.0, prompt=500.0, done=10.0, kv=0.0, **kw):
    return EngineReading(running=running, waiting=waiting, steps=steps, step_tokens=steps * 5,
                         generation_tokens=gen, prompt_tokens=prompt, finished=done, kv_cache=kv, **kw)


def reading(*engines: EngineReading, start: float | None = T0 - 1000, names=None) -> Reading:
    names = names or ([str(i) for i in range(len(engines))] if len(engines) > 1 else ["0"])
    return Reading(engines=dict(zip(names, engines, strict=False)), process_start=start, model="tiny")


def run(seq, settings=S):
    """Feed (seconds, Reading) pairs; return the verdicts."""
    state = Memory()
    out = []
    for t, r in seq:
        v = assess(state, r, settings, T0 + t)
        state = v.memory
        out.append(v)
    return out


def words(verdicts):
    return [(v.word, v.code) for v in verdicts]


BUSY = [eng(2, 1, steps=100 + 40 * i, gen=1000 + 80 * i, kv=0.4) for i in range(10)]


def test_busy_when_work_and_progress():
    v = run([(0, reading(BUSY[0])), (60, reading(BUSY[1]))])
    assert words(v) == [("busy", OK), ("busy", OK)]
    assert v[0].action == "reread"  # no baseline and work present: read again, do not guess
    assert v[1].action is None
    assert v[1].tokens_per_second == pytest.approx(80 / 60)
    assert v[1].steps_per_second == pytest.approx(40 / 60)
    assert v[1].running == 2 and v[1].waiting == 1 and v[1].kv_cache == pytest.approx(40.0)


FROZEN = eng(2, 2, kv=0.5)


@pytest.mark.parametrize("field,value", [
    ("steps", 101.0), ("step_tokens", 501.0), ("generation_tokens", 1001.0),
    ("prompt_tokens", 501.0), ("finished", 11.0), ("kv_cache", 0.51),
])
def test_any_single_signal_is_progress(field, value):
    moved = EngineReading(**{**FROZEN._asdict(), field: value})
    v = run([(0, reading(FROZEN)), (60, reading(moved))])
    assert v[1].word == "busy"


def test_long_prefill_only_kv_moves_is_busy():
    a, b = eng(1, 0, kv=0.2), eng(1, 0, kv=0.35)
    assert run([(0, reading(a)), (60, reading(b))])[1].word == "busy"


def test_stalling_then_stuck_needs_readings_and_seconds():
    seq = [(0, reading(FROZEN)), (60, reading(FROZEN)), (120, reading(FROZEN)), (180, reading(FROZEN))]
    v = run(seq)
    # comparison 1 at 60 s: stalling; 2 at 120 s: 2 readings and 120 s since the last progress -> stuck
    assert words(v) == [("busy", OK), ("stalling", WARNING), ("stuck", CRITICAL), ("stuck", CRITICAL)]
    assert v[2].stalled_seconds == pytest.approx(120)
    assert "no progress for 120 s over 2 readings" in v[2].text


def test_fast_rechecks_do_not_make_stuck_before_the_seconds():
    # a scheduler in SOFT state re-checks every 10 s: 5 comparisons but only 50 s -> still stalling
    seq = [(t, reading(FROZEN)) for t in range(0, 60, 10)]
    v = run(seq)
    assert [w for w, _ in words(v)][1:] == ["stalling"] * 5


def test_stuck_seconds_zero_readings_alone_decide():
    s = Settings(stuck_readings=2, stuck_seconds=0, min_gap=2)
    v = run([(0, reading(FROZEN)), (3, reading(FROZEN)), (6, reading(FROZEN))], s)
    assert words(v)[1:] == [("stalling", WARNING), ("stuck", CRITICAL)]


def test_recovery_resets_the_stall():
    seq = [(0, reading(FROZEN)), (60, reading(FROZEN)), (120, reading(FROZEN)),
           (180, reading(eng(2, 2, steps=150))), (240, reading(eng(2, 2, steps=150)))]
    assert [w for w, _ in words(run(seq))] == ["busy", "stalling", "stuck", "busy", "stalling"]


def test_idle_asks_for_a_probe_and_the_probe_settles_it():
    v = run([(0, reading(eng()))])[0]
    assert (v.word, v.action) == ("idle", "probe")
    done = after_probe(v, ProbeOutcome(ANSWERED, 0.05, prompt_tokens=2, completion_tokens=1), None, S, T0 + 1)
    assert (done.word, done.code, done.probe_seconds) == ("idle", OK, 0.05)
    assert "probe answered in 0.05 s" in done.text


def test_the_probe_own_footprint_is_not_progress():
    v0 = run([(0, reading(eng()))])[0]
    st = after_probe(v0, ProbeOutcome(ANSWERED, 0.05, prompt_tokens=2, completion_tokens=1), None, S, T0).memory
    # next run: work present, and only our probe's tokens moved: no proof of progress
    moved_by_probe = eng(1, 0, steps=101, gen=1001, prompt=502, done=11)
    moved_by_probe = EngineReading(**{**moved_by_probe._asdict(), "step_tokens": 500 + 3})
    v = assess(st, reading(moved_by_probe), S, T0 + 60)
    assert v.word == "stalling"
    more = EngineReading(**{**moved_by_probe._asdict(), "generation_tokens": 1005.0})
    assert assess(st, reading(more), S, T0 + 60).word == "busy"


def test_idle_probe_unanswered_and_no_progress_is_stalling_then_stuck_over_readings_and_seconds():
    """Issue 12: an unanswered idle probe meets the same proof as stuck under load ("wait twice")."""
    v = run([(0, reading(eng()))])[0]
    done = after_probe(v, ProbeOutcome(NO_ANSWER, 10, "timed out"), reading(eng()), S, T0 + 11)
    assert (done.word, done.code) == ("stalling", WARNING) and "probe went unanswered" in done.text
    # 60 s later: idle-looking again, probed again, unanswered again: 2 readings but only 71 s < 120 s
    v2 = assess(done.memory, reading(eng()), S, T0 + 60)
    assert (v2.word, v2.action) == ("stalling", "probe")  # not probed: the last probe's word stands
    done2 = after_probe(v2, ProbeOutcome(NO_ANSWER, 10, "timed out"), reading(eng()), S, T0 + 71)
    assert (done2.word, done2.code) == ("stalling", WARNING)
    v3 = assess(done2.memory, reading(eng()), S, T0 + 130)
    done3 = after_probe(v3, ProbeOutcome(NO_ANSWER, 10, "timed out"), reading(eng()), S, T0 + 141)
    assert (done3.word, done3.code) == ("stuck", CRITICAL) and "over 3 readings" in done3.text


def test_idle_probe_streak_ends_when_a_probe_answers_or_anything_moves():
    v = run([(0, reading(eng()))])[0]
    first = after_probe(v, ProbeOutcome(NO_ANSWER, 10, "timed out"), reading(eng()), S, T0 + 11)
    ok = after_probe(assess(first.memory, reading(eng()), S, T0 + 60),
                     ProbeOutcome(ANSWERED, 0.1, prompt_tokens=2, completion_tokens=1), None, S, T0 + 60.1)
    assert (ok.word, ok.code) == ("idle", OK) and ok.memory.unanswered is None
    moved = assess(first.memory, reading(eng(done=11)), S, T0 + 60)
    assert moved.memory.unanswered is None


def test_idle_probe_seen_queued_on_the_reread_is_work_not_idle():
    """Our own probe visible as running on the re-read: live metrics, an engine with work: stalling, not stuck."""
    v = run([(0, reading(eng()))])[0]
    done = after_probe(v, ProbeOutcome(NO_ANSWER, 10, "timed out"), reading(eng(1, 0)), S, T0 + 11)
    assert (done.word, done.code) == ("stalling", WARNING)


def test_late_probe_answer_is_progress_not_stuck():
    """Issue 14: the re-read shows exactly the probe's own work (a step, its tokens, one finished request)."""
    v = run([(0, reading(eng()))])[0]
    served = eng(steps=102, gen=1001, prompt=502, done=11)
    done = after_probe(v, ProbeOutcome(NO_ANSWER, 10.3, "timed out after 10.0 s"), reading(served), S, T0 + 11)
    assert done.code != CRITICAL and done.word == "idle" and "progressed" in done.text


def test_idle_probe_unanswered_but_progress_is_not_stuck():
    v = run([(0, reading(eng()))])[0]
    done = after_probe(v, ProbeOutcome(NO_ANSWER, 10, "timed out"), reading(eng(2, 3, gen=1500)), S, T0 + 11)
    assert (done.word, done.code) == ("busy", OK)


def test_probe_rejected_is_a_warning_not_stuck():
    v = run([(0, reading(eng()))])[0]
    done = after_probe(v, ProbeOutcome(REJECTED, 0.01, "HTTP 404"), None, S, T0 + 1)
    assert (done.word, done.code) == ("idle", WARNING)


def test_probe_refused_is_down():
    v = run([(0, reading(eng()))])[0]
    failed = probe_failure(ProbeOutcome(REFUSED, 0, "connection refused"))
    assert failed == Failure("down", "connection refused")  # no verdict of the probe's: the door of silence
    done = assess_failure(v.memory, Evidence(failed), S, T0 + 1)
    assert (done.word, done.code) == ("down", CRITICAL)


@pytest.mark.parametrize("after", [
    reading(eng(2, 2), start=T0 - 10),  # new process start time
    reading(eng(2, 2, steps=5, gen=10, prompt=3, done=0), start=None),  # counters went backwards
    Reading(engines={"0": EngineReading(**{**FROZEN._asdict(), "created": T0 + 50})}, process_start=None),
])
def test_restart_is_never_compared(after):
    before = Reading(engines={"0": EngineReading(**{**FROZEN._asdict(), "created": T0 - 900})},
                     process_start=None if after.process_start is None else T0 - 1000)
    v = run([(0, reading(FROZEN)), (60, reading(FROZEN)), (120, before), (180, after)])
    assert v[3].word == "restarted" and v[3].code == OK
    assert v[3].tokens_per_second is None
    # and the stall is forgotten: the next frozen reading is only the first comparison again
    v2 = assess(v[3].memory, after, S, T0 + 240)
    assert v2.word == "stalling"


def test_restarted_idle_asks_for_probe():
    v = run([(0, reading(FROZEN)), (60, reading(eng(), start=T0 - 5))])
    assert (v[1].word, v[1].action) == ("restarted", "probe")


def test_data_parallel_one_frozen_engine_is_stuck_and_named():
    def dp(i):
        return reading(eng(2, 1, steps=100 + 50 * i, gen=1000 + 100 * i), eng(2, 2))
    v = run([(0, dp(0)), (60, dp(1)), (120, dp(2))])
    assert words(v)[1:] == [("stalling", WARNING), ("stuck", CRITICAL)]
    assert "engine 1" in v[2].text and "engine 0 busy" in v[2].text
    assert v[2].engines == {"0": "busy", "1": "stuck"}


def test_sleeping_engine_is_ok_and_not_probed():
    v = run([(0, reading(eng(asleep=True)))])[0]
    assert (v.word, v.code, v.action) == ("sleeping", OK, None)


def test_too_soon_repeats_last_verdict_and_keeps_baseline():
    v = run([(0, reading(FROZEN)), (60, reading(FROZEN)), (60.5, reading(FROZEN)), (61, reading(FROZEN))])
    assert [w for w, _ in words(v)] == ["busy", "stalling", "stalling", "stalling"]
    # the quick re-runs did not count as comparisons: still 1 reading
    assert v[3].memory.stalls["0"].readings == 1
    assert v[3].memory.baseline.at.wall == T0 + 60


@pytest.mark.parametrize("jump", [-7200, -1, 7200])
def test_clock_jumps_cost_a_baseline_not_a_false_stuck(jump):
    v = run([(0, reading(FROZEN)), (60, reading(FROZEN)), (60 + jump, reading(FROZEN))])
    assert v[2].code != CRITICAL
    assert v[2].action == "reread"


def test_unresponsive_turns_critical_once_it_lasts():
    st = Memory()
    out = []
    for t in (0, 60, 120):
        v = assess_failure(st, Evidence(Failure("unresponsive", "GET /metrics timed out")), S, T0 + t)
        st = v.memory
        out.append((v.word, v.code))
    assert out == [("unresponsive", WARNING), ("unresponsive", WARNING), ("unresponsive", CRITICAL)]
    # a good reading clears the streak
    assert assess(st, reading(eng()), S, T0 + 130).memory.unresponsive is None


@pytest.mark.parametrize("failure,expected", [
    (Failure("down", "connection refused"), ("down", CRITICAL)),
    (Failure("no metrics", "HTTP 404", models=MODELS_OK, model="m"), ("no metrics", WARNING)),
    (Failure("no metrics", "HTTP 404", models=DOWN), ("no metrics", CRITICAL)),
    # /v1/models did not answer: one run is no proof (issue 14: one rule for every "did not answer")
    (Failure("no metrics", "HTTP 404", models=UNRESPONSIVE), ("no metrics", WARNING)),
    (Failure("no metrics", "HTTP 404"), ("no metrics", WARNING)),  # /v1/models not asked: no proof at all
    (Failure("proxy", "", models=MODELS_OK, model="m"), ("proxy", OK)),
    (Failure("proxy", "refused", models=DOWN), ("proxy", CRITICAL)),
    (Failure("proxy", "timed out", models=UNRESPONSIVE), ("proxy", WARNING)),
    (Failure("unreachable", "DNS lookup failed"), ("unreachable", UNKNOWN)),
])
def test_failures(failure, expected):
    v = assess_failure(Memory(), Evidence(failure), S, T0)
    assert (v.word, v.code) == expected


def test_down_within_grace_after_a_handler_restart_is_starting():
    v = assess_failure(Memory(), Evidence(Failure("down", "connection refused"), None, T0 - 30), S, T0)
    assert (v.word, v.code) == ("starting", WARNING)
    v = assess_failure(Memory(), Evidence(Failure("down", "connection refused"), None, T0 - 3600), S, T0)
    assert (v.word, v.code) == ("down", CRITICAL)


def test_a_baseline_survives_a_down_run():
    v = run([(0, reading(FROZEN)), (60, reading(FROZEN))])
    st = assess_failure(v[1].memory, Evidence(Failure("down", "refused")), S, T0 + 90).memory
    assert assess(st, reading(FROZEN), S, T0 + 120).word == "stuck"


@pytest.mark.parametrize("garbage", [
    {"reading": "x"}, {"reading": {"at": "nan", "engines": {}}}, {"reading": {"at": 1, "engines": {"0": {"running": "a"}}}},
    {"stall": [1, 2]}, {"stall": {"0": {"since": "x", "count": None}}}, {"verdict": 3}, {"probe": {"prompt_tokens": "x"}},
])
def test_malformed_state_is_a_baseline_not_a_crash(garbage):
    v = assess(codec.from_json(garbage), reading(FROZEN), S, T0)
    assert v.code != CRITICAL


def test_our_own_probe_is_not_reported_as_throughput():
    v0 = run([(0, reading(eng()))])[0]
    st = after_probe(v0, ProbeOutcome(ANSWERED, 0.05, prompt_tokens=2, completion_tokens=1), None, S, T0).memory
    after = EngineReading(**{**eng()._asdict(), "steps": 101.0, "generation_tokens": 1001.0, "prompt_tokens": 502.0,
                             "finished": 11.0})
    v = assess(st, reading(after), S, T0 + 60)
    assert v.word == "idle"
    assert (v.tokens_per_second, v.prompt_tokens_per_second, v.steps_per_second) == (0.0, 0.0, 0.0)


def test_short_gap_never_counts_a_stall_reading_even_when_another_engine_moves():
    """Found by hypothesis: another engine's progress must not turn a 0.5 s gap into proof of a stall."""
    s = Settings(stuck_readings=1, stuck_seconds=0, min_gap=2)
    v = run([(0, reading(eng(2, 0, steps=1), FROZEN)), (3, reading(eng(2, 0, steps=2), FROZEN))], s)
    assert v[1].engines == {"0": "busy", "1": "stuck"}
    # 0.5 s later engine 1's work is gone (its KV freed: that is movement), engine 0 has a request queued
    later = assess(v[1].memory, reading(eng(0, 1, steps=2), eng(0, 0)), s, T0 + 3.5)
    assert later.engines == {"0": "busy", "1": "idle"} and (later.word, later.code) == ("busy", OK)
    # and an engine already stuck stays stuck, its stall count unchanged, while the other one moves
    still = assess(v[1].memory, reading(eng(2, 0, steps=9), FROZEN), s, T0 + 3.5)
    assert still.engines == {"0": "busy", "1": "stuck"}
    assert still.memory.stalls["1"].readings == v[1].memory.stalls["1"].readings
