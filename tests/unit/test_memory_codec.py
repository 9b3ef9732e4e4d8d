"""The state file's codec is total: any JSON a file can hold reads as a Memory (pieces it cannot use read
as "nothing known"), so neither the check nor the handler needs a safety net of its own around it."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.numbers import LARGEST, finite
from check_vllm.contract.values import EngineReading, Reading
from check_vllm.contract.vocab import CRITICAL
from check_vllm.judge.assess import assess
from check_vllm.memory import codec

KEYS = ["reading", "previous", "stall", "unresponsive", "unanswered", "probe", "verdict", "whole_page",
        "at", "engines", "since", "count", "mono", "boot", "word", "state", "text", "running", "steps",
        "0", "1", "process_start", "model", "prompt_tokens", "completion_tokens", "asleep"]
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) \
    | st.sampled_from([10**400, -10**400, "nan", "inf", "1e999", 2**53 + 1])
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_any_json_reads_as_a_memory_and_never_a_critical(data):
    m = codec.from_json(data)
    assert isinstance(m, Memory)
    json.dumps(codec.to_json(m), allow_nan=False)  # and what it writes back is plain JSON
    idle = Reading(engines={"0": EngineReading(running=0, waiting=0, steps=1.0)})
    assert assess(m, idle, Settings(), 1.7e9).code != CRITICAL


def test_integers_too_big_for_a_float_are_nothing_known():
    big = 10**400
    assert finite(big) is None
    m = codec.from_json({"reading": {"at": 1.7e9, "engines": {"0": {"running": big}}},
                         "stall": {"0": {"since": big, "count": 1}}, "verdict": {"word": "busy", "at": big}})
    assert m.baseline is None and not m.stalls and m.last is not None and m.last.at is None


def test_one_number_rule_for_pages_and_files():
    """The rule the reader applies to /metrics is the one the codec applies to the file: a count the reader
    kept always reads back, one it dropped never does."""
    for value, usable in [(3, True), (1.5, True), (LARGEST, True), (-LARGEST, True), (2**53 + 1, False),
                          (LARGEST * 2, False), (float("nan"), False), (float("inf"), False), (True, False),
                          ("5", False), (None, False)]:
        assert (finite(value) is not None) == usable, value
        m = codec.from_json({"reading": {"at": 1.7e9, "engines": {"0": {"steps": value}}}})
        assert (m.baseline is not None) == usable, value


def test_an_unprobed_idle_is_a_flag_in_the_memory_not_a_text_compare():
    """Issue 39: whether an idle verdict still waits for its probe was read from its wording; rewording it would
    have changed how older state files are judged. It is a flag now, and a file from before the flag whose text
    is the old wording reads as unprobed, once."""
    from check_vllm.contract.kept import Remembered
    from check_vllm.contract.vocab import IDLE, OK
    from check_vllm.judge.assess import unproven_idle

    flagged = codec.from_json(codec.to_json(Memory(last=Remembered(IDLE, OK, "reworded", 1.0, unprobed=True))))
    assert flagged.last is not None and flagged.last.unprobed and unproven_idle(flagged.last)
    settled = codec.from_json(codec.to_json(Memory(last=Remembered(IDLE, OK, "no work, not probed", 1.0))))
    assert settled.last is not None and not unproven_idle(settled.last)  # the flag decides, not the text
    before = codec.from_json({"verdict": {"word": IDLE, "state": OK, "text": "no work, not probed", "at": 1.0}})
    assert before.last is not None and unproven_idle(before.last)
    other = codec.from_json({"verdict": {"word": IDLE, "state": OK, "text": "idle: probe answered", "at": 1.0}})
    assert other.last is not None and not unproven_idle(other.last)


def test_a_file_without_a_probe_excuses_nothing():
    """No `probe` in the file is no probe: read as one of 0 tokens it excused one step of every later comparison,
    so an engine that moved exactly one step between two runs was called still."""
    from check_vllm.judge.compare import allowance

    saved = codec.to_json(Memory())
    assert "probe" not in saved
    memory = codec.from_json(saved)
    assert memory.probe is None and allowance(memory.probe) == {}
