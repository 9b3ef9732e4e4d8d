"""One proof rule for every CRITICAL a restart acts on (issues 12 and 14), as pure tables.

Each case fed through the judge exactly as the check feeds it (assess / after_probe / assess_failure),
asserting the word and code after each step. Times are Instants: the wall clock and the boot-time clock.
"""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import (
    ENGINE_DEAD,
    MODELS_OK,
    NO_ANSWER,
    EngineReading,
    Evidence,
    Failure,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.vocab import CRITICAL, DOWN, NO_METRICS, OK, PROXY, UNRESPONSIVE, WARNING
from check_vllm.judge.assess import assess
from check_vllm.judge.idle_completion import after_probe, probe_failure
from check_vllm.judge.no_reading import assess_failure

T0 = 1_700_000_000.0
BOOT = "5b2c1e7e-0000-4000-8000-000000000001"
SLOW = Settings(stuck_readings=2, stuck_seconds=600.0, min_gap=2.0, max_age=3600.0)


def at(wall: float, mono: float | None = None, boot: str | None = BOOT) -> Instant:
    return Instant(T0 + wall, 1000.0 + (wall if mono is None else mono), boot)


def frozen(start: float | None = T0 - 1000, **kw: float) -> Reading:
    fields = dict(running=2, waiting=2, steps=100.0, step_tokens=500.0, generation_tokens=1000.0,
                  prompt_tokens=500.0, finished=10.0, kv_cache=0.5)
    return Reading(engines={"0": EngineReading(**{**fields, **kw})}, process_start=start, model="tiny")


def feed(steps, settings=SLOW):
    memory, out = Memory(), []
    for now, reading in steps:
        v = assess(memory, reading, settings, now)
        memory = v.memory
        out.append((v.word, v.code))
    return out, memory


# --------------------------------------------------------------------------- class 5: a clock step is not stall time


def test_a_forward_wall_clock_step_is_not_stall_time():
    """+900 s on the wall clock, 7.5 s on the boot-time clock: --stuck-seconds 600 is not reached."""
    words, _ = feed([(at(0), frozen()), (at(5), frozen()), (at(905, mono=7.5), frozen())])
    assert words == [("busy", OK), ("stalling", WARNING), ("stalling", WARNING)]


def test_a_backward_wall_clock_step_does_not_cost_the_comparison():
    words, memory = feed([(at(0), frozen()), (at(5), frozen()), (at(-900, mono=12.0), frozen())])
    assert words == [("busy", OK), ("stalling", WARNING), ("stalling", WARNING)]
    assert memory.stalls["0"].readings == 2


def test_real_time_still_proves_stuck_whatever_the_wall_clock_says():
    words, _ = feed([(at(0), frozen()), (at(300), frozen()), (at(-5000, mono=700), frozen())])
    assert words[-1] == ("stuck", CRITICAL)


def test_a_baseline_from_another_boot_is_no_baseline():
    words, _ = feed([(at(0), frozen()), (at(5), frozen()), (Instant(T0 + 700, 3.0, "another-boot"), frozen())])
    assert words == [("busy", OK), ("stalling", WARNING), ("busy", OK)]  # a first reading again


def test_an_old_state_file_without_the_boot_clock_falls_back_to_the_wall_clock():
    words, _ = feed([(T0, frozen()), (T0 + 300, frozen()), (T0 + 700, frozen())])
    assert words == [("busy", OK), ("stalling", WARNING), ("stuck", CRITICAL)]


# --------------------------------------------------------------------------- class 4: a page missing families proves nothing


def test_a_page_without_counter_families_the_previous_had_does_not_grow_the_stall():
    cut = Reading(engines={"0": EngineReading(running=2, waiting=2, kv_cache=0.5, steps=100.0)},
                  process_start=T0 - 1000, model="tiny")
    fast = Settings(stuck_readings=2, stuck_seconds=0.0, min_gap=2.0, max_age=3600.0)
    words, memory = feed([(at(0), frozen()), (at(10), frozen()), (at(20), cut), (at(30), cut)], fast)
    assert words == [("busy", OK), ("stalling", WARNING), ("stalling", WARNING), ("stalling", WARNING)]
    assert memory.stalls["0"].readings == 1


# --------------------------------------------------------------------------- issue 11: a balancer is not a restart


def test_two_processes_taking_turns_read_balancer_not_restarted():
    a, b = frozen(start=T0 - 1000, finished=1.0), frozen(start=T0 - 400)
    words, _ = feed([(at(0), a), (at(10), b), (at(20), a), (at(30), b)])
    assert words[1] == ("restarted", OK)
    assert words[2:] == [("balancer", WARNING), ("balancer", WARNING)]


def test_a_restart_to_an_older_process_is_a_balancer_at_once():
    words, _ = feed([(at(0), frozen(start=T0 - 400)), (at(10), frozen(start=T0 - 1000))])
    assert words[1] == ("balancer", WARNING)


def test_a_real_restart_that_stays_still_reads_restarted():
    new = frozen(start=T0 + 5, steps=1.0, step_tokens=5.0, generation_tokens=3.0, prompt_tokens=2.0, finished=0.0)
    words, _ = feed([(at(0), frozen()), (at(10), frozen()), (at(20), new), (at(30), new)],
                    Settings(stuck_readings=2, stuck_seconds=0.0))
    assert words[2] == ("restarted", OK) and words[3][0] != "balancer"


def page(done: float) -> Reading:
    """Multiprocess mode: no start time, no _created; counters only."""
    return Reading(engines={"0": EngineReading(running=1, waiting=0, steps=done * 10, generation_tokens=done * 10,
                                               finished=done)}, process_start=None)


def test_a_restart_soon_after_a_fresh_first_reading_is_restarted_not_a_balancer():
    """Multiprocess mode (issue 22): the server's first page after a start (1 request done), a later one,
    then a restart whose new process has already passed the first page's counters. Counters alone cannot
    tell it from that first process resumed; only an identity can say "the process seen before"."""
    words, _ = feed([(at(0), page(1)), (at(10), page(50)), (at(20), page(5))])
    assert words[2] == ("restarted", OK)


def test_counters_only_histories_taking_turns_are_not_called_a_balancer():
    """Two histories jumping back and forth without an identity read as restarts (OK), never as stuck: the
    price of the rule above; with start times the same turns are a balancer (first test of this block)."""
    words, _ = feed([(at(0), page(1000)), (at(10), page(200)), (at(20), page(1001)), (at(30), page(201))])
    assert words[1] == ("restarted", OK) and words[3] == ("restarted", OK)
    assert all(w[0] not in ("stuck", "stalling") for w in words)


# --------------------------------------------------------------------------- issue 12: a dead engine is not "stuck"


def test_a_dead_engine_answering_500_is_down_engine_died():
    v = assess(Memory(), Reading(engines={"0": EngineReading()}, process_start=T0 - 5), SLOW, at(0))
    failed = probe_failure(ProbeOutcome(ENGINE_DEAD, 0.02, "completion answered HTTP 500: EngineCore encountered an "
                                                           "issue. See stack trace (above) for the root cause."))
    done = assess_failure(v.memory, Evidence(failed), SLOW, at(0.1))
    assert (done.word, done.code) == ("down", CRITICAL) and done.text.startswith("engine died")


# --------------------------------------------------------------------------- every "did not answer" path, one rule

SILENT = [
    Failure(UNRESPONSIVE, "GET /metrics timed out after 29.0 s"),
    Failure(UNRESPONSIVE, "/metrics answered HTTP 503"),
    Failure(PROXY, "/v1/models timed out after 29.0 s", models=UNRESPONSIVE),
    Failure(PROXY, "/v1/models answered HTTP 503", models=UNRESPONSIVE),
    Failure(NO_METRICS, "/metrics is not vLLM's (...); /v1/models failed too: timed out", models=UNRESPONSIVE),
]


@pytest.mark.parametrize("failure", SILENT, ids=lambda f: f"{f.kind}: {f.detail[:30]}")
def test_no_answer_is_critical_only_over_readings_and_seconds(failure):
    s = Settings(stuck_readings=2, stuck_seconds=120.0)
    memory, seen = Memory(), []
    for t in (0, 60, 130):
        v = assess_failure(memory, Evidence(failure), s, at(t))
        memory = v.memory
        seen.append(v.code)
    assert seen == [WARNING, WARNING, CRITICAL]


def test_nothing_listening_is_critical_at_once():
    assert assess_failure(Memory(), Evidence(Failure(DOWN, "connection refused")), SLOW, at(0)).code == CRITICAL
    assert assess_failure(Memory(), Evidence(Failure(PROXY, "connection refused", models=DOWN)), SLOW, at(0)).code == CRITICAL


def test_a_metrics_answer_ends_the_silence():
    s = Settings(stuck_readings=2, stuck_seconds=0.0)
    v = assess_failure(Memory(), Evidence(SILENT[0]), s, at(0))
    v = assess(v.memory, frozen(), s, at(10))
    assert v.memory.unresponsive is None
    again = assess_failure(v.memory, Evidence(SILENT[0]), s, at(20))
    assert again.code == WARNING  # a new streak, not the old one continued


def test_proxy_answering_again_is_ok_and_forgets_the_streak():
    v = assess_failure(Memory(), Evidence(SILENT[2]), SLOW, at(0))
    ok = assess_failure(v.memory, Evidence(Failure(PROXY, "", models=MODELS_OK, model="m")), SLOW, at(10))
    assert (ok.word, ok.code) == ("proxy", OK) and ok.memory.unresponsive is None


def test_an_unanswered_probe_after_a_streak_of_work_judges_the_work():
    s = Settings(stuck_readings=2, stuck_seconds=0.0)
    idle = Reading(engines={"0": EngineReading(steps=5.0, generation_tokens=5.0, finished=1.0)}, process_start=T0)
    v = assess(Memory(), idle, s, at(0))
    first = after_probe(v, ProbeOutcome(NO_ANSWER, 10, "timed out"), idle, s, at(10))
    assert (first.word, first.code) == ("stalling", WARNING)
    # the next reading shows work (the batch that the metrics lagged behind): the per-engine rule takes over
    # with a streak of its own (the idle one is not carried over: not every reading of it showed this work)
    queued = Reading(engines={"0": EngineReading(running=2, waiting=6, steps=5.0, generation_tokens=5.0,
                                                 finished=1.0)}, process_start=T0)
    v2 = assess(first.memory, queued, s, at(20))
    assert (v2.word, v2.code) == ("stalling", WARNING) and v2.memory.unanswered is None
    v3 = assess(v2.memory, queued, s, at(30))
    assert (v3.word, v3.code) == ("stuck", CRITICAL)
    moving = Reading(engines={"0": EngineReading(running=2, waiting=6, steps=50.0, generation_tokens=90.0,
                                                 finished=1.0)}, process_start=T0)
    assert assess(first.memory, moving, s, at(20)).word == "busy"


# --------------------------------------------------------------------------- class 8: many engines, one bounded line


def test_sixty_four_engines_with_twelve_stalling_are_summarised():
    def dp(i: int) -> Reading:
        engines = {}
        for n in range(64):
            moving = n % 5 != 3 or n > 60
            engines[str(n)] = EngineReading(running=2, waiting=1, steps=100.0 + (50 * i if moving else 0),
                                            generation_tokens=1000.0 + (100 * i if moving else 0), kv_cache=0.3)
        return Reading(engines=engines, process_start=T0 - 1000)
    words, _ = feed([(at(0), dp(0)), (at(10), dp(1))])
    v = assess(Memory(), dp(0), SLOW, at(0))
    v = assess(v.memory, dp(1), SLOW, at(10))
    assert (v.word, v.code) == ("stalling", WARNING)
    assert v.text.startswith("12 of 64 engines stalling: 3, 8, 13 ... and 9 more"), v.text
    assert len(v.text) < 400, len(v.text)


def test_starting_lasts_only_until_the_restarted_server_was_seen_serving():
    """Issue 10 (found by the incident tier): a server that serves after a restart and dies again is down."""
    marker = T0 + 100.0
    before = assess_failure(Memory(), Evidence(Failure(DOWN, "connection refused"), None, marker), SLOW, at(110))
    assert (before.word, before.code) == ("starting", WARNING)
    served = assess(before.memory, frozen(start=T0 + 120), SLOW, at(130))
    again = assess_failure(served.memory, Evidence(Failure(DOWN, "connection refused"), None, marker), SLOW, at(140))
    assert (again.word, again.code) == ("down", CRITICAL)
