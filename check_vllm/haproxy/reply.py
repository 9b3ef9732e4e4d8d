"""Verdict -> HAProxy agent-check reply: the one table, and the reply line. Pure.

HAProxy (src/tcpcheck.c, tcpcheck_agent_expect_reply) reads one line ended by CR or LF, made of words
split by spaces, tabs or commas: a health word (`up`, `down`, `fail`, `stopped`), an admin word
(`ready`, `drain`, `maint`), a weight (`75%`), then an optional `#` and a description, shown on the stats
page only when a health word came with it. Only the agent can undo what it said, so every reply names the
admin state, and a reply that takes a server out always comes with the words that bring it back later.

The asymmetry this table encodes: taking a backend out of rotation is cheap and reversible, a restart is
neither. So the first sign (a word that is not proof: stalling, starting, unresponsive while unproven)
drains, and only proof (what check_vllm_restart would act on) marks the server down. A verdict that says
the agent itself cannot judge (its URL is a balancer, the backend does not speak HTTP to it) abstains:
a misconfigured agent must never take capacity out of a fleet; HAProxy's own health check still decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract import vocab
from check_vllm.contract.safe_text import clean
from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING

#: The description's cap: the stats page shows it whole, a line stays far below HAProxy's buffer.
REASON_CAP = 160


class Reply(NamedTuple):
    """What the agent tells HAProxy: a health word ("" leaves health to HAProxy's own check), an admin word."""

    name: str
    health: str
    admin: str
    why: str

    def line(self, reason: str = "") -> str:
        """The reply as HAProxy reads it: words, then `#` and the verdict (no CR, LF or control character)."""
        words = " ".join(w for w in (self.health, self.admin) if w)
        text = clean(reason, REASON_CAP)
        return f"{words} #{text}\n" if text else f"{words}\n"


#: Serves: back in rotation, health UP (undoes an earlier down, drain or fail of ours).
READY = Reply("ready", "up", "ready", "serving: in rotation")
#: Unproven trouble: no new requests, the ones in flight go on; health left to HAProxy's own check.
DRAIN = Reply("drain", "", "drain", "a first sign, not proof: out of rotation until it serves again")
#: Proof of a stall: appears up but fails ("fail" on the stats page), and drained.
FAIL = Reply("fail", "fail", "drain", "proven stuck: DOWN, as a failed health check")
#: Proof that nothing serves: DOWN, and drained.
DOWN = Reply("down", "down", "drain", "nothing serves: DOWN")
#: The agent cannot judge (its own configuration is wrong): undoes its drain, leaves health alone.
ABSTAIN = Reply("abstain", "", "ready", "the agent cannot judge: HAProxy's own health check decides")

#: The one table: every contract word (check_vllm.contract.vocab.VERDICTS), at each state it can carry.
#: tests/unit/test_agent_reply.py fails when a word or a state of the contract has no row here.
TABLE: Mapping[str, Mapping[int, Reply]] = MappingProxyType({
    vocab.BUSY: {OK: READY},
    vocab.STALLING: {WARNING: DRAIN},
    vocab.STUCK: {CRITICAL: FAIL},
    vocab.IDLE: {OK: READY, WARNING: READY},  # WARNING: our probe was rejected or cut short, not the server
    vocab.RESTARTED: {OK: READY},
    vocab.SLEEPING: {OK: DRAIN},  # an engine asleep refuses completions until it is woken
    vocab.DOWN: {CRITICAL: DOWN},
    vocab.UNRESPONSIVE: {WARNING: DRAIN, CRITICAL: FAIL},
    vocab.NO_METRICS: {WARNING: ABSTAIN, CRITICAL: DRAIN},  # no progress to judge; CRITICAL: /v1/models silent too
    vocab.PROXY: {OK: ABSTAIN, WARNING: ABSTAIN, CRITICAL: ABSTAIN},  # the agent never runs in proxy mode
    vocab.STARTING: {WARNING: DRAIN},  # loading: drained, never down while its process is young
    vocab.STOPPING: {WARNING: DRAIN},  # its listener closed, its process draining: no new requests
    vocab.UNREACHABLE: {UNKNOWN: ABSTAIN},
    vocab.BALANCER: {WARNING: ABSTAIN},
    vocab.PROTOCOL: {UNKNOWN: ABSTAIN},
})

#: Before the first verdict, or when the judging loop has fallen silent: not proof of anything.
NO_VERDICT = DRAIN


def reply_for(word: str, code: int) -> Reply:
    """The table's reply; a word or state the table lacks drains (the test keeps that from happening)."""
    return TABLE.get(word, {}).get(code, NO_VERDICT)


def rows() -> list[tuple[str, str, str]]:
    """(word, state, reply words) for --help and the docs, in the contract's order."""
    out = []
    for w in vocab.VERDICTS:
        for state in w.states:
            r = reply_for(w.word, state)
            out.append((w.word, vocab.CODE_NAMES[state], " ".join(x for x in (r.health, r.admin) if x)))
    return out
