"""How every judgement ends: the verdict, with itself remembered in the memory it hands on (finish), and a reading
made the next baseline (keep). Shared by the judges of a reading, of the idle probe, of quiet and of silence. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Baseline, Memory, Remembered, Streak
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import state_of
from check_vllm.judge.compare import Gauges, Rates

_NO_STALLS: Mapping[str, Streak] = MappingProxyType({})
NO_RATES = Rates()


def finish(memory: Memory, word: str, text: str, g: Gauges | None, at: Instant, *,
           action: str | None = None, engines: Mapping[str, str] | None = None, stalled: float | None = None,
           probe: float | None = None, rate_values: Rates = NO_RATES, unprobed: bool = False,
           state: int | None = None) -> Verdict:
    """The verdict, with itself remembered in the memory it hands on. Its state is the contract row's
    (vocab.VERDICTS); a word that can carry more than one is given the one it has (`state`)."""
    code = state_of(word, state)
    if code is None:  # a word without a row, or a state its row does not carry: a bug of ours, never a guess
        raise ValueError(f"verdict {word!r} cannot carry state {state!r}")
    engines = MappingProxyType(dict(engines or {}))
    return Verdict(
        word=word, code=code, text=text, action=action, engines=engines,
        memory=memory._replace(last=Remembered(word, code, text, at.wall, engines, unprobed)),
        running=g.running if g else None, waiting=g.waiting if g else None, kv_cache=g.kv_cache if g else None,
        stalled_seconds=stalled if stalled is not None else (0.0 if g else None),
        probe_seconds=probe, **rate_values._asdict(),
    )


def keep(memory: Memory, reading: Reading, now: Instant, stalls: Mapping[str, Streak] = _NO_STALLS) -> Memory:
    """The reading becomes the baseline; the probe footprint it may have explained is spent."""
    return memory._replace(baseline=Baseline(reading, now), previous=memory.baseline,
                           stalls=MappingProxyType(dict(stalls)), probe=None)
