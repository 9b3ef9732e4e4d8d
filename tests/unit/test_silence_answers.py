"""An answer is not silence (issue 22): /v1/models that answers 4xx or loops redirects, or a peer that
does not speak HTTP, is never a restartable verdict. Pure tables over check_vllm.judge.no_reading."""

from __future__ import annotations

import pytest

from check_vllm.contract import values, vocab
from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import Evidence, Failure
from check_vllm.contract.vocab import (
    CRITICAL,
    DOWN,
    NO_METRICS,
    PROXY,
    RESTARTABLE,
    UNKNOWN,
    UNREACHABLE,
    UNRESPONSIVE,
    WARNING,
)
from check_vllm.judge.no_reading import assess_failure

#: Spelt out, so that each row runs (and can fail) on a tree without them; pinned to vocab below.
MODELS_ANSWERED, PROTOCOL = "answered", "protocol"
EAGER = Settings(stuck_readings=1, stuck_seconds=0.0)
T0 = 1_000_000.0

ROWS = [  # (failure, word, code): each judged twice in a row with the eager proof rule
    (Failure(PROXY, "/v1/models answered HTTP 401", models=MODELS_ANSWERED), PROXY, WARNING),
    (Failure(PROXY, "GET /v1/models: too many redirects", models=MODELS_ANSWERED), PROXY, WARNING),
    (Failure(NO_METRICS, "/metrics answered HTTP 404; /v1/models answered HTTP 401", models=MODELS_ANSWERED),
     NO_METRICS, WARNING),
    (Failure(PROTOCOL, "GET /metrics: connection reset at once, no HTTP answer"), PROTOCOL, UNKNOWN),
    (Failure(PROXY, "GET /v1/models: the answer is not HTTP", models=PROTOCOL), PROTOCOL, UNKNOWN),
    (Failure(NO_METRICS, "x; /v1/models could not be sent from here", models=UNREACHABLE), UNREACHABLE, UNKNOWN),
    # what stays as it was: refused is down at once, silence is proven over readings
    (Failure(PROXY, "connection refused", models=DOWN), PROXY, CRITICAL),
    (Failure(NO_METRICS, "/metrics answered HTTP 404; /v1/models failed too: 503", models=UNRESPONSIVE),
     NO_METRICS, CRITICAL),
    (Failure(UNRESPONSIVE, "GET /metrics timed out"), UNRESPONSIVE, CRITICAL),
]


@pytest.mark.parametrize("failure,word,code", ROWS, ids=[f"{r[0].kind}-{r[0].models}-{r[2]}" for r in ROWS])
def test_an_answer_is_never_silence(failure, word, code):
    memory = Memory()
    for run in range(2):
        v = assess_failure(memory, Evidence(failure), EAGER, T0 + 10 * run)
        memory = v.memory
    assert (v.word, v.code) == (word, code), v.summary
    if code != CRITICAL:
        assert v.memory.unresponsive is None  # no streak starts on an answer


def test_the_new_words_are_the_vocabulary():
    assert (values.MODELS_ANSWERED, vocab.PROTOCOL) == (MODELS_ANSWERED, PROTOCOL)
    assert PROTOCOL in vocab.WORDS and PROTOCOL not in RESTARTABLE
