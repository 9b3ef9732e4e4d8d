"""Memory <-> the JSON the state file holds. All defensive parsing of saved data happens here, once.

A piece that is missing, hand-edited or from a foreign file comes back as None (or empty): the run
then takes a new baseline for that piece instead of guessing. The JSON shape is version 1 of the
state file (check_vllm.memory.statefile.VERSION): keys reading, previous, stall, unresponsive, unanswered,
probe, verdict, whole_page, starts, stopping, engine_dead, paused, no_pause_route, no_checkpoint_route,
no_fault_route. Keys are only ever added: a reader ignores the keys it does not know, and a key it misses reads as "nothing known", so files of older and newer check_vllm read both ways.
Times are wall-clock seconds, with the boot-time clock beside them ("mono", "boot") where the writer
had it; a file without them (an older check_vllm) still reads, on the wall clock.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from check_vllm.contract.engines import BY_KEY, VLLM
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Baseline, Footprint, Memory, Remembered, Starts, Stopping, Streak
from check_vllm.contract.numbers import finite
from check_vllm.contract.values import EngineReading, Reading
from check_vllm.contract.vocab import state_of

#: What a baseline keeps of an engine: its numbers (`coarse` is words for this run's output, not kept).
_ENGINE_FIELDS = frozenset(EngineReading._fields) - {"coarse"}


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
        if k in ("asleep", "lagging_gauges"):
            if not isinstance(v, bool):
                return None
        elif finite(v) is None:
            return None
        known[k] = v
    return EngineReading(**known)


def instant_of(raw: dict[str, Any], key: str) -> Instant | None:
    wall = finite(raw.get(key))
    if wall is None:
        return None
    mono, boot = finite(raw.get("mono")), raw.get("boot")
    if mono is None or not isinstance(boot, str) or not boot:
        return Instant(wall)
    return Instant(wall, mono, boot[:64])


def instant_json(at: Instant, key: str) -> dict[str, Any]:
    out: dict[str, Any] = {key: at.wall}
    if at.mono is not None and at.boot:
        out.update(mono=at.mono, boot=at.boot)
    return out


def _baseline(raw: Any) -> Baseline | None:
    raw = _dict(raw)
    at = instant_of(raw, "at")
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
    engine = raw.get("engine") if raw.get("engine") in BY_KEY else VLLM.key  # written only for another engine
    ops = finite(raw.get("weight_ops"))  # written only where the page has the counter
    return Baseline(Reading(engines=engines, process_start=start, model=model, engine=engine,  # type: ignore[arg-type]
                            weight_ops=ops), at)


def _streak(raw: Any) -> Streak | None:
    raw = _dict(raw)
    since, count = instant_of(raw, "since"), finite(raw.get("count"))
    return Streak(since, count) if since is not None and count is not None and count >= 0 else None


def _starts(raw: Any) -> Starts | None:
    raw = _dict(raw)
    streak, last = _streak(raw), raw.get("last")
    if streak is None or not isinstance(last, str) or not last:
        return None
    return Starts(min(streak.readings, 1e6), streak.since, last[:200])


def _stopping(raw: Any) -> Stopping | None:
    raw = _dict(raw)
    since, process = instant_of(raw, "since"), raw.get("process")
    if since is None or not isinstance(process, str):  # "": a first look that found no process (NO_PROCESS)
        return None
    return Stopping(since, process[:200], instant_of(_dict(raw.get("gone")), "at"))


def _footprint(raw: Any) -> Footprint | None:
    """The probe's footprint, None where the file has none: no probe excuses nothing (read as a probe of 0 tokens,
    a missing one excused one step and one finished request of every comparison after it)."""
    if not isinstance(raw, dict):
        return None
    p, c = finite(raw.get("prompt_tokens", 0)), finite(raw.get("completion_tokens", 0))
    if p is None or c is None:
        return None
    return Footprint(max(p, 0.0), max(c, 0.0), finite(raw.get("at")) or 0.0)


def remembered(raw: Any) -> Remembered | None:
    """The saved verdict; its time and code stay None when unusable, so the handler can say so."""
    if not isinstance(raw, dict) or not isinstance(raw.get("word"), str):
        return None
    engines = {str(n): str(w) for n, w in _dict(raw.get("engines")).items()}
    text = str(raw.get("text", ""))
    unprobed = raw.get("unprobed") is True if "unprobed" in raw else text == _UNPROBED_BEFORE_THE_FLAG
    return Remembered(  # the state of a word is the contract's, never the file's
        word=raw["word"], code=state_of(raw["word"], raw.get("state")),
        text=text, at=finite(raw.get("at")), engines=MappingProxyType(engines), unprobed=unprobed,
    )


#: How a state file written before the `unprobed` flag said it (the idle verdict's text then): read once more,
#: so an upgrade does not judge an unprobed idle as settled.
_UNPROBED_BEFORE_THE_FLAG = "no work, not probed"


def from_json(data: Any) -> Memory:
    """Total: whatever JSON a file holds gives a Memory (unusable pieces read as "nothing known")."""
    data = _dict(data)
    stalls = {str(n): s for n, s in ((n, _streak(v)) for n, v in _dict(data.get("stall")).items()) if s is not None}
    return Memory(
        baseline=_baseline(data.get("reading")),
        previous=_baseline(data.get("previous")),
        stalls=MappingProxyType(stalls),
        unresponsive=_streak(data.get("unresponsive")),
        unanswered=_streak(data.get("unanswered")),
        probe=_footprint(data.get("probe")),
        last=remembered(data.get("verdict")),
        whole_page=instant_of(_dict(data.get("whole_page")), "since"),
        starts=_starts(data.get("starts")),
        stopping=_stopping(data.get("stopping")),
        engine_dead=instant_of(_dict(data.get("engine_dead")), "at"),
        paused=instant_of(_dict(data.get("paused")), "since"),
        no_pause_route=finite(data.get("no_pause_route")),
        no_checkpoint_route=finite(data.get("no_checkpoint_route")),
        no_fault_route=finite(data.get("no_fault_route")),
    )


# --------------------------------------------------------------------------- writing out


def _engine_json(e: EngineReading) -> dict[str, Any]:
    return {k: v for k, v in e._asdict().items() if v is not None and k in _ENGINE_FIELDS}


def _streak_json(s: Streak) -> dict[str, Any]:
    return {**instant_json(s.since, "since"), "count": s.readings}


def _baseline_json(b: Baseline) -> dict[str, Any]:
    r = b.reading
    out = {**instant_json(b.at, "at"), "process_start": r.process_start, "model": r.model,
           "engines": {n: _engine_json(e) for n, e in r.engines.items()}}
    if r.engine != VLLM.key:  # a vLLM server's file stays as it was
        out["engine"] = r.engine
    if r.weight_ops is not None:
        out["weight_ops"] = r.weight_ops
    return out


def to_json(memory: Memory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if memory.baseline is not None:
        out["reading"] = _baseline_json(memory.baseline)
        out["stall"] = {n: _streak_json(s) for n, s in memory.stalls.items()}
    if memory.previous is not None:
        out["previous"] = _baseline_json(memory.previous)
    for key in ("unresponsive", "unanswered"):
        streak = getattr(memory, key)
        if streak is not None:
            out[key] = _streak_json(streak)
    if memory.probe is not None:
        out["probe"] = memory.probe._asdict()
    if memory.whole_page is not None:
        out["whole_page"] = instant_json(memory.whole_page, "since")
    if memory.starts is not None:
        out["starts"] = {**_streak_json(Streak(memory.starts.since, memory.starts.seen)), "last": memory.starts.last}
    if memory.stopping is not None:
        stop = memory.stopping
        out["stopping"] = {**instant_json(stop.since, "since"), "process": stop.process}
        if stop.gone is not None:
            out["stopping"]["gone"] = instant_json(stop.gone, "at")
    if memory.engine_dead is not None:
        out["engine_dead"] = instant_json(memory.engine_dead, "at")
    if memory.paused is not None:
        out["paused"] = instant_json(memory.paused, "since")
    for key in ("no_pause_route", "no_checkpoint_route", "no_fault_route"):
        if getattr(memory, key) is not None:
            out[key] = getattr(memory, key)
    if memory.last is not None:
        last = memory.last
        out["verdict"] = {"word": last.word, "state": last.code, "text": last.text, "at": last.at,
                          "engines": dict(last.engines), "unprobed": last.unprobed}
    return out
