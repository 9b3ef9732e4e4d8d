"""One verdict table (check_vllm.contract.vocab.VERDICTS): each row carries the word's states, what each does to
the server's rotation, and whether a restart may follow; the judge's finish() takes a verdict's state from it."""

from __future__ import annotations

import pytest

from check_vllm.contract import rotation, vocab
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.judge.finish import finish

ENTRIES = {vocab.READY, vocab.DRAIN, vocab.FAIL, vocab.MARK_DOWN, vocab.ABSTAIN}


def test_the_rotation_table_is_the_rows_rotation_column():
    assert dict(rotation.TABLE) == {w.word: w.rotation for w in vocab.VERDICTS}
    for w in vocab.VERDICTS:
        assert w.states and set(w.rotation.values()) <= ENTRIES, w
        # proof takes a server out; a first sign only drains; a restartable word at CRITICAL is never in rotation
        if w.restartable and vocab.CRITICAL in w.states:
            assert w.rotation[vocab.CRITICAL] in (vocab.FAIL, vocab.MARK_DOWN), w


@pytest.mark.parametrize("row", vocab.VERDICTS, ids=lambda w: w.word)
def test_finish_takes_the_state_from_the_row(row):
    at = Instant(1000.0)
    if len(row.states) == 1:
        assert finish(Memory(), row.word, "why", None, at).code == row.states[0]
    else:
        with pytest.raises(ValueError, match="cannot carry"):
            finish(Memory(), row.word, "why", None, at)
    for state in row.states:
        verdict = finish(Memory(), row.word, "why", None, at, state=state)
        assert verdict.code == state and verdict.memory.last.code == state


def test_a_state_a_multi_state_word_cannot_carry_is_refused():
    with pytest.raises(ValueError):
        finish(Memory(), vocab.PAUSED, "why", None, Instant(1.0), state=vocab.CRITICAL)
    with pytest.raises(ValueError):
        finish(Memory(), "no such word", "why", None, Instant(1.0), state=vocab.OK)
