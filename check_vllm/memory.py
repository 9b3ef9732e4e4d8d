"""Memory <-> the JSON the state file holds. All defensive parsing of saved data happens here, once.

A piece that is missing, hand-edited or from a foreign file comes back as None (or empty): the run
then takes a new baseline for that piece instead of guessing. The JSON shape is version 1 of the
state file (check_vllm.statefile.VERSION): keys reading, stall, unresponsive, probe, verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .values import Baseline, EngineReading, Footprint, Memory, Reading, Remembered, Streak

_ENGINE_FIELDS = frozenset(EngineReading.__dataclass_fields__)


def finite(value: Any) -> float | None:
    """A finite float from anything JSON can hold, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            return None
    out = float(value)
    return out if math.isfinite(out) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------- reading back


def _engine(raw: Any) -> EngineReading | None:
    if not isinstance(raw, dict):
        return None
    known: dict[str, Any] = {}
    for k, v in raw.items():
        if k not in _ENGINE_FIELDS:
            continue
        if k == "asleep":
            if not isinstance(v, bool):
                return None
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or finite(v) is None or abs(v) > 2.0**53:
            return None
        known[k] = v
    return EngineReading(**known)


def _baseline(raw: Any) -> Baseline | None:
    raw = _dict(raw)
    at = finite(raw.get("at"))
    engines_raw = raw.get("engines")
    if at is None or not isinstance(engines_raw, dict) or not engines_raw:
        return None
    engines = {str(k): _engine(v) for k, v in engines_raw.items()}
    if any(e is None for e in engines.values()):
        return None
    start = raw.get("process_start")
    if start is not None:
        start = finite(start)
        if start is None:
            return None
    model = raw.get("model") if isinstance(raw.get("model"), str) else None
    return Baseline(Reading(engines=engines, process_start=start, model=model), at)  # type: ignore[arg-type]


def _streak(raw: Any) -> Streak | None:
    raw = _dict(raw)
    since, count = finite(raw.get("since")), finite(raw.get("count"))
    return Streak(since, count) if since is not None and count is not None else None


def _footprint(raw: Any) -> Footprint | None:
    raw = _dict(raw)
    p, c = finite(raw.get("prompt_tokens", 0)), finite(raw.get("completion_tokens", 0))
    if p is None or c is None:
        return None
    return Footprint(max(p, 0.0), max(c, 0.0), finite(raw.get("at")) or 0.0)


def remembered(raw: Any) -> Remembered | None:
    """The saved verdict; its time and code stay None when unusable, so the handler can say so."""
    if not isinstance(raw, dict) or not isinstance(raw.get("word"), str):
        return None
    code = raw.get("state")
    engines = {str(n): str(w) for n, w in _dict(raw.get("engines")).items()}
    return Remembered(
        word=raw["word"], code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        text=str(raw.get("text", "")), at=finite(raw.get("at")), engines=MappingProxyType(engines),
    )


def from_json(data: Any) -> Memory:
    data = _dict(data)
    stalls = {str(n): s for n, s in ((n, _streak(v)) for n, v in _dict(data.get("stall")).items()) if s is not None}
    return Memory(
        baseline=_baseline(data.get("reading")),
        stalls=MappingProxyType(stalls),
        unresponsive=_streak(data.get("unresponsive")),
        probe=_footprint(data.get("probe")),
        last=remembered(data.get("verdict")),
    )


# --------------------------------------------------------------------------- writing out


def _engine_json(e: EngineReading) -> dict[str, Any]:
    return {k: v for k, v in e.__dict__.items() if v is not None}


def _streaks_json(streaks: Mapping[str, Streak]) -> dict[str, Any]:
    return {n: {"since": s.since, "count": s.readings} for n, s in streaks.items()}


def to_json(memory: Memory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if memory.baseline is not None:
        r, at = memory.baseline
        out["reading"] = {"at": at, "process_start": r.process_start, "model": r.model,
                          "engines": {n: _engine_json(e) for n, e in r.engines.items()}}
        out["stall"] = _streaks_json(memory.stalls)
    if memory.unresponsive is not None:
        out["unresponsive"] = {"since": memory.unresponsive.since, "count": memory.unresponsive.readings}
    if memory.probe is not None:
        out["probe"] = memory.probe._asdict()
    if memory.last is not None:
        last = memory.last
        out["verdict"] = {"word": last.word, "state": last.code, "text": last.text, "at": last.at,
                          "engines": dict(last.engines)}
    return out
