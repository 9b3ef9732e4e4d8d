"""Verdict -> HAProxy agent-check reply: the rotation table in HAProxy's words, and the reply line. Pure.

HAProxy (src/tcpcheck.c, tcpcheck_agent_expect_reply) reads one line ended by CR or LF, made of words
split by spaces, tabs or commas: a health word (`up`, `down`, `fail`, `stopped`), an admin word
(`ready`, `drain`, `maint`), a weight (`75%`), then an optional `#` and a description, shown on the stats
page only when a health word came with it. Only the agent can undo what it said, so every reply names the
admin state, and a reply that takes a server out always comes with the words that bring it back later.

Which verdict drains, fails, marks down or abstains is the rotation table's (check_vllm.contract.rotation, the
one owner, shared with the readiness probe); this module only words each entry. A misconfigured agent
abstains: it must never take capacity out of a fleet; HAProxy's own health check still decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract import rotation, vocab
from check_vllm.contract.safe_text import clean

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
READY = Reply(vocab.READY, "up", "ready", "serving: in rotation")
#: Unproven trouble: no new requests, the ones in flight go on; health left to HAProxy's own check.
DRAIN = Reply(vocab.DRAIN, "", "drain", "a first sign, not proof: out of rotation until it serves again")
#: Proof of a stall: appears up but fails ("fail" on the stats page), and drained.
FAIL = Reply(vocab.FAIL, "fail", "drain", "proven stuck: DOWN, as a failed health check")
#: Proof that nothing serves: DOWN, and drained.
DOWN = Reply(vocab.MARK_DOWN, "down", "drain", "nothing serves: DOWN")
#: The agent cannot judge (its own configuration is wrong): undoes its drain, leaves health alone.
ABSTAIN = Reply(vocab.ABSTAIN, "", "ready", "the agent cannot judge: HAProxy's own health check decides")

#: Each entry of the rotation table (check_vllm.contract.rotation, the one owner) as the agent words it.
REPLIES: Mapping[str, Reply] = MappingProxyType({r.name: r for r in (READY, DRAIN, FAIL, DOWN, ABSTAIN)})

#: The rotation table in the agent's words: every contract word, at each state it can carry.
TABLE: Mapping[str, Mapping[int, Reply]] = MappingProxyType({
    word: {state: REPLIES[entry] for state, entry in states.items()} for word, states in rotation.TABLE.items()})

#: Before the first verdict, or when the judging loop has fallen silent: not proof of anything.
NO_VERDICT = REPLIES[rotation.NO_VERDICT]


def reply_for(word: str, code: int) -> Reply:
    """The table's reply; a word or state the table lacks drains (the test keeps that from happening)."""
    return REPLIES[rotation.rotation_for(word, code)]


def rows() -> list[tuple[str, str, str]]:
    """(word, state, reply words) for --help and the docs, in the contract's order."""
    out = []
    for w in vocab.VERDICTS:
        for state in w.states:
            r = reply_for(w.word, state)
            out.append((w.word, vocab.CODE_NAMES[state], " ".join(x for x in (r.health, r.admin) if x)))
    return out
