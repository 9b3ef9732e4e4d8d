"""Issue 22 item 8: a run that did not probe is no proof of health while an unanswered probe stands."""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import ANSWERED, NO_ANSWER, REJECTED, EngineReading, ProbeOutcome, Reading
from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from check_vllm.judge.assess import assess
from check_vllm.judge.idle_completion import after_probe

S = Settings(stuck_readings=2, stuck_seconds=120.0, min_gap=2.0, max_age=3600.0)
T0 = 1_700_000_000.0
QUIET = EngineReading(steps=100.0, step_tokens=500.0, generation_tokens=1000.0, prompt_tokens=500.0, finished=10.0,
                      kv_cache=0.0)
MOVED = QUIET._replace(finished=11.0, generation_tokens=1001.0)
BUSY = MOVED._replace(running=1.0)


def page(e: EngineReading = QUIET) -> Reading:
    return Reading(engines={"0": e}, process_start=T0 - 1000, model="tiny")


def unanswered(probes: int) -> Memory:
    """The memory after `probes` unanswered idle probes, 70 s apart: 1 is stalling, 3 is stuck."""
    memory = Memory()
    for i in range(probes):
        v = assess(memory, page(), S, T0 + 70 * i)
        memory = after_probe(v, ProbeOutcome(NO_ANSWER, 10, "timed out"), page(), S, T0 + 70 * i + 11).memory
    return memory


@pytest.mark.parametrize("probes, word, code", [(1, "stalling", WARNING), (3, "stuck", CRITICAL)])
@pytest.mark.parametrize("later", [1.0, 30.0, 500.0])
def test_a_run_that_does_not_probe_keeps_the_last_probe_word(probes, word, code, later):
    memory = unanswered(probes)
    at = T0 + 70 * (probes - 1) + 11 + later
    v = assess(memory, page(), S, at)
    assert (v.word, v.code, v.action) == (word, code, "probe")
    assert "went unanswered" in v.text and v.memory.unanswered == memory.unanswered
    again = assess(v.memory, page(), S, at + 5)  # and the run after it, still unprobed
    assert (again.word, again.code) == (word, code)


@pytest.mark.parametrize("now, expect", [(page(MOVED), ("idle", OK)), (page(BUSY), ("busy", OK))])
def test_movement_or_work_ends_the_pending_word(now, expect):
    v = assess(unanswered(3), now, S, T0 + 200)
    assert (v.word, v.code) == expect and v.memory.unanswered is None


def test_an_answered_probe_ends_it_and_a_rejected_one_proves_nothing():
    pending = assess(unanswered(3), page(), S, T0 + 200)
    ok = after_probe(pending, ProbeOutcome(ANSWERED, 0.1, prompt_tokens=2, completion_tokens=1), None, S, T0 + 201)
    assert (ok.word, ok.code, dict(ok.engines)) == ("idle", OK, {"0": "idle"}) and ok.memory.unanswered is None
    nothing = after_probe(pending, ProbeOutcome(REJECTED, 0.01, "HTTP 404"), None, S, T0 + 201)
    assert (nothing.word, nothing.code) == ("stuck", CRITICAL) and "proved nothing" in nothing.text


def test_a_probing_run_does_not_repeat_an_unprobed_idle_as_its_own():
    """A --no-probe run 1.1 s before (same state file) left `idle, not probed`: the next run must probe."""
    seen = assess(Memory(), page(), S, T0)
    unprobed = assess(seen.memory, page(), S, T0 + 60)  # a run that did not probe
    assert (unprobed.word, unprobed.action) == ("idle", "probe")
    v = assess(unprobed.memory, page(), S, T0 + 61.1)
    assert (v.word, v.action) == ("idle", "probe") and "repeated" not in v.text
    answered = after_probe(v, ProbeOutcome(ANSWERED, 0.1), None, S, T0 + 61.2)
    close = assess(answered.memory, page(), S, T0 + 62)  # a settled idle is still repeated within min_gap
    assert (close.word, close.action) == ("idle", None) and "repeated" in close.text
