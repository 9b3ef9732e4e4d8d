"""A run's verdict: its word, its exit code, what it rests on, the figures its perfdata prints, and the memory
the run leaves the next (check_vllm.contract.kept). Made by the judge, printed by every front end. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract.kept import Memory

_EMPTY: Mapping[str, str] = MappingProxyType({})  # read-only: a shared default must not be mutable


class Verdict(NamedTuple):
    word: str
    code: int  # the plugin exit code, vocab.OK .. CRITICAL
    text: str
    memory: Memory
    #: vocab.PROBE or vocab.REREAD: what would settle the question; None when it is settled.
    action: str | None = None
    engines: Mapping[str, str] = _EMPTY
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None  # percent, the fullest engine
    tokens_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    steps_per_second: float | None = None
    stalled_seconds: float | None = None
    probe_seconds: float | None = None
    #: Whose server it is, where a run without a reading could tell (an answer naming its engine's flag, the
    #: host's process): a key of check_vllm.contract.engines.BY_KEY; None: the reading or the memory says.
    engine: str | None = None
    #: The server answered its own readiness without a reading (its model list named the model): it has loaded,
    #: whatever its /metrics says (off, guarded): a startup probe's pass.
    loaded: bool = False

    @property
    def summary(self) -> str:
        """The status text: the word first, then what it rests on."""
        return f"{self.word}: {self.text}" if self.text else self.word
