"""Whether a verdict lets a server take new work: the rotation column of the contract's rows, by word. Pure.

Shared by every consumer that takes capacity out or puts it back: the HAProxy agent words each entry
for HAProxy (check_vllm.haproxy.reply), the readiness probe passes or fails on it (check_vllm.probes.answers).

The asymmetry this table encodes: taking a server out of rotation is cheap and reversible, a restart is
neither. So the first sign (a word that is not proof: stalling, starting, unresponsive while unproven)
drains, and only proof (what check_vllm_restart would act on) marks the server down or failed. A verdict
that says the monitoring side cannot judge (its URL is a balancer, the peer does not speak HTTP to it, DNS
or TLS failed on our side) abstains: a misconfigured monitor must never take capacity out of a fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from check_vllm.contract.vocab import DRAIN, VERDICTS

#: Every contract word at each state it can carry -> its rotation entry (vocab.READY, DRAIN, FAIL, MARK_DOWN,
#: ABSTAIN): the contract's own rows (check_vllm.contract.vocab.VERDICTS), by word.
TABLE: Mapping[str, Mapping[int, str]] = MappingProxyType({w.word: w.rotation for w in VERDICTS})

#: Before the first verdict, or for a word or state the table lacks: not proof of anything, so drained.
NO_VERDICT = DRAIN


def rotation_for(word: str, code: int) -> str:
    """The table's entry; a word or state the table lacks drains (the tests keep that from happening)."""
    return TABLE.get(word, {}).get(code, NO_VERDICT)
