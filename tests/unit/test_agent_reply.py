"""The agent's table and reply line (check_vllm.haproxy.reply), and what the loop answers when it falls silent."""

from __future__ import annotations

import re

import pytest

from check_vllm.contract import vocab
from check_vllm.contract.defaults import OPTIONS, SETTINGS
from check_vllm.contract.kept import Memory
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING
from check_vllm.haproxy import reply
from check_vllm.haproxy.listen import parse_listen
from check_vllm.haproxy.reply import ABSTAIN, DOWN, DRAIN, FAIL, NO_VERDICT, READY, TABLE, reply_for
from check_vllm.haproxy.watch import Watch
from check_vllm.observe import Observation
from check_vllm.server.fetch import Endpoint

HEALTH = {"up", "down", "fail", "stopped"}
ADMIN = {"ready", "drain", "maint"}


def haproxy_words(line: str) -> tuple[list[str], str]:
    """The words and description as HAProxy 2.6's tcpcheck_agent_expect_reply splits one reply line."""
    first = re.split(r"[\r\n]", line, maxsplit=1)[0]
    words, _, desc = first.partition("#")
    return [w for w in re.split(r"[ \t,]+", words) if w], desc.strip(" \t")


def test_every_word_and_state_of_the_contract_has_exactly_one_row():
    wanted = {(w.word, s) for w in vocab.VERDICTS for s in w.states}
    have = {(word, s) for word, states in TABLE.items() for s in states}
    assert wanted == have, {"missing": wanted - have, "not in the contract": have - wanted}


def test_only_proof_marks_a_backend_down_and_proof_always_does():
    """DOWN/fail exactly where check_vllm_restart may restart: a restartable word at CRITICAL."""
    for w in vocab.VERDICTS:
        for state in w.states:
            got = reply_for(w.word, state)
            proof = w.restartable and state == CRITICAL
            assert (got.health in ("down", "fail")) == proof, (w.word, state, got)
            if proof:
                assert got.admin == "drain", (w.word, got)  # drained too, whatever HAProxy's own check says


@pytest.mark.parametrize(("word", "state", "want"), [
    (vocab.BUSY, OK, READY), (vocab.IDLE, OK, READY), (vocab.RESTARTED, OK, READY),
    (vocab.STALLING, WARNING, DRAIN), (vocab.STARTING, WARNING, DRAIN), (vocab.UNRESPONSIVE, WARNING, DRAIN),
    (vocab.STUCK, CRITICAL, FAIL), (vocab.DOWN, CRITICAL, DOWN), (vocab.UNRESPONSIVE, CRITICAL, FAIL),
    (vocab.BALANCER, WARNING, ABSTAIN), (vocab.UNREACHABLE, UNKNOWN, ABSTAIN), (vocab.PROTOCOL, UNKNOWN, ABSTAIN),
])
def test_the_issue_s_mapping(word, state, want):
    assert reply_for(word, state) == want


def test_a_drain_never_touches_health_so_a_loading_backend_cannot_flap():
    """`up` would reset HAProxy's health counter to UP at every agent-inter while its /health check fails."""
    assert DRAIN.health == "" and ABSTAIN.health == ""
    assert READY.health == "up" and READY.admin == "ready"  # undoes an earlier drain and down of ours


def test_unknown_word_or_state_drains():
    assert reply_for("no such word", OK) == NO_VERDICT == DRAIN
    assert reply_for(vocab.BUSY, CRITICAL) == NO_VERDICT


@pytest.mark.parametrize("r", [READY, DRAIN, FAIL, DOWN, ABSTAIN])
def test_every_reply_is_one_line_of_known_words(r):
    line = r.line("stuck: no progress for 130 s | x\r\nup ready #again\x1b[31m")
    assert line.endswith("\n") and line.count("\n") == 1 and "\r" not in line
    words, desc = haproxy_words(line)
    assert words == [w for w in (r.health, r.admin) if w]
    assert set(words) <= HEALTH | ADMIN
    assert desc.startswith("stuck: no progress for 130 s") and "\x1b" not in desc
    assert len(desc) <= reply.REASON_CAP


def test_a_reply_without_reason_has_no_sharp():
    assert READY.line("") == "up ready\n"
    assert DRAIN.line() == "drain\n"


def test_rows_cover_the_contract_in_its_order():
    rows = reply.rows()
    assert [r[0] for r in rows] == [w.word for w in vocab.VERDICTS for _ in w.states]
    assert ("stalling", "WARNING", "drain") in rows and ("stuck", "CRITICAL", "fail drain") in rows


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:5555", ("127.0.0.1", 5555)), (":6000", ("127.0.0.1", 6000)), ("6001", ("127.0.0.1", 6001)),
    ("[::1]:6002", ("::1", 6002)), ("0.0.0.0:1", ("0.0.0.0", 1)), ("127.0.0.1:", ("127.0.0.1", 5555)),
])
def test_listen_addresses(text, want):
    assert parse_listen(text, 5555) == want


@pytest.mark.parametrize("text", ["127.0.0.1:0", "127.0.0.1:65536", "host:http", "127.0.0.1:-1"])
def test_bad_listen_addresses_say_why(text):
    with pytest.raises(ValueError, match="port must be a number"):
        parse_listen(text, 5555)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_silent_loop_is_no_verdict(monkeypatch):
    """The judging loop wedged (or died): after stale_after the answer drains, naming the last verdict."""
    clock, said = Clock(), []
    watch = Watch(Endpoint("http://127.0.0.1:9"), SETTINGS, OPTIONS._replace(metrics_timeout=2.0), 1.0, 60.0,
                  say=said.append, mono=clock, wall=clock)
    assert watch.answer().reply == NO_VERDICT  # before the first reading
    busy = Verdict(vocab.BUSY, OK, "2 running", Memory())
    monkeypatch.setattr("check_vllm.long_running.observe", lambda *a, **k: Observation(busy))
    watch.judge()
    assert watch.answer().line() == "up ready #busy: 2 running\n"
    assert said == ["drain -> ready: busy: 2 running"]
    clock.t += watch.stale_after - 0.1
    assert watch.answer().reply == READY
    clock.t += 0.2
    got = watch.answer()
    assert got.reply == NO_VERDICT and "no verdict for" in got.summary and "busy: 2 running" in got.summary
