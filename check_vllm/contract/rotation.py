"""Whether a verdict lets a server take new work: the one rotation table. Pure.

Shared by every consumer that takes capacity out or puts it back: the HAProxy agent words each entry
for HAProxy (check_vllm.haproxy.reply), the readiness probe passes or fails on it (check_vllm.contract.probes).

The asymmetry this table encodes: taking a server out of rotation is cheap and reversible, a restart is
neither. So the first sign (a word that is not proof: stalling, starting, unresponsive while unproven)
drains, and only proof (what check_vllm_restart would act on) marks the server down or failed. A verdict
that says the monitoring side cannot judge (its URL is a balancer, the peer does not speak HTTP to it, DNS
or TLS failed on our side) abstains: a misconfigured monitor must never take capacity out of a fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from check_vllm.contract import vocab
from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING

#: Serves: in rotation.
READY = "ready"
#: Unproven trouble: no new work, the work in flight goes on.
DRAIN = "drain"
#: Proof of a stall: out, as a failed health check.
FAIL = "fail"
#: Proof that nothing serves: out.
DOWN = "down"
#: The monitoring side cannot judge: leave the decision to whoever else looks.
ABSTAIN = "abstain"

#: The one table: every contract word (check_vllm.contract.vocab.VERDICTS), at each state it can carry.
#: tests/unit/test_agent_reply.py fails when a word or a state of the contract has no row here.
TABLE: Mapping[str, Mapping[int, str]] = MappingProxyType({
    vocab.BUSY: {OK: READY},
    vocab.STALLING: {WARNING: DRAIN},
    vocab.STUCK: {CRITICAL: FAIL},
    vocab.IDLE: {OK: READY, WARNING: READY},  # WARNING: our probe was rejected or cut short, not the server
    vocab.RESTARTED: {OK: READY},
    vocab.SLEEPING: {OK: DRAIN},  # an engine asleep refuses completions until it is woken
    vocab.DOWN: {CRITICAL: DOWN},
    vocab.UNRESPONSIVE: {WARNING: DRAIN, CRITICAL: FAIL},
    vocab.NO_METRICS: {WARNING: ABSTAIN, CRITICAL: DRAIN},  # no progress to judge; CRITICAL: /v1/models silent too
    vocab.PROXY: {OK: ABSTAIN, WARNING: ABSTAIN, CRITICAL: ABSTAIN},  # a balancer's URL judges no one server
    vocab.STARTING: {WARNING: DRAIN},  # loading: drained, never down while its process is young
    vocab.STOPPING: {WARNING: DRAIN},  # its listener closed, its process draining: no new requests
    vocab.UNREACHABLE: {UNKNOWN: ABSTAIN},
    vocab.BALANCER: {WARNING: ABSTAIN},
    vocab.PROTOCOL: {UNKNOWN: ABSTAIN},
})

#: Before the first verdict, or for a word or state the table lacks: not proof of anything, so drained.
NO_VERDICT = DRAIN


def rotation_for(word: str, code: int) -> str:
    """The table's entry; a word or state the table lacks drains (the tests keep that from happening)."""
    return TABLE.get(word, {}).get(code, NO_VERDICT)
