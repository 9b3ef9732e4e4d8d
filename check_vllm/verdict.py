"""The decision: (previous state, new observation, settings, now) -> Verdict with the next state.

Pure: no I/O, no clock, no httpx, no nagiosplugin. The check keeps the state in a file between
runs and the Netdata plugin keeps it in memory; both call these functions, so they never disagree.

The rule it implements: work present plus movement of ANY progress signal is busy and healthy;
stuck needs work present and no movement over `stuck_readings` comparisons spanning
`stuck_seconds`. Counters of two processes are never compared.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .reading import COUNTER_FIELDS, PROGRESS_FIELDS, EngineReading, Reading

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3

#: Every word a verdict can start with; Netdata charts one dimension per word.
WORDS = (
    "busy", "stalling", "stuck", "idle", "restarted", "sleeping",
    "down", "unresponsive", "no metrics", "proxy", "starting",
)
# Worst first: the engine word that names the whole server.
_RANK = ("stuck", "stalling", "busy", "idle", "sleeping")

#: Bound on what one failed probe (a short prompt, max_tokens 1) can move.
FAILED_PROBE_FOOTPRINT = {"prompt_tokens": 64.0, "completion_tokens": 1.0}


class Settings(NamedTuple):
    stuck_readings: int = 2
    stuck_seconds: float = 120.0
    #: A comparison over less time than this proves nothing about a stall.
    min_gap: float = 2.0
    #: A previous reading older than this is no baseline (the server may have lived a life since).
    max_age: float = 3600.0
    #: After a restart marker, down/unresponsive/no-metrics read as "starting" for this long.
    start_grace: float = 900.0


class Probe(NamedTuple):
    """What the tiny completion sent to an idle server came back with."""

    ok: bool
    seconds: float
    detail: str = ""
    status: int | None = None  # HTTP status when there was one
    refused: bool = False  # connection refused: the server is down, not stuck
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    #: The run's -t budget left the probe less than --probe-timeout: a non-answer then proves nothing.
    cut_short: bool = False


class Failure(NamedTuple):
    """/metrics could not be read (or is not to be read, in proxy mode)."""

    kind: str  # "down" | "unresponsive" | "no metrics" | "proxy"
    detail: str
    models_ok: bool | None = None  # /v1/models answered (no metrics, proxy)
    model: str | None = None


class Verdict(NamedTuple):
    word: str
    state: int
    text: str
    new_state: dict[str, Any]
    #: "probe": idle, a 1-token completion would prove it; "reread": no baseline, read again soon.
    action: str | None = None
    engines: Mapping[str, str] = MappingProxyType({})  # read-only: a shared default must not be mutable
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None  # percent, the fullest engine
    tokens_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    steps_per_second: float | None = None
    stalled_seconds: float | None = None
    probe_seconds: float | None = None

    @property
    def status(self) -> str:
        return f"{self.word}: {self.text}" if self.text else self.word


# --------------------------------------------------------------------------- state helpers


def _reading_json(reading: Reading, now: float) -> dict[str, Any]:
    return {
        "at": now,
        "process_start": reading.process_start,
        "model": reading.model,
        "engines": {name: e.to_json() for name, e in reading.engines.items()},
    }


def _baseline(state: dict[str, Any]) -> tuple[Reading, float] | None:
    """The previous reading from the state, or None when it is missing or malformed."""
    raw = state.get("reading")
    if not isinstance(raw, dict):
        return None
    try:
        at = float(raw["at"])
        start = raw.get("process_start")
        engines = {str(k): EngineReading.from_json(v) for k, v in raw["engines"].items()}
        if start is not None:
            start = float(start)
        if not math.isfinite(at) or not engines:
            return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    model = raw.get("model") if isinstance(raw.get("model"), str) else None
    return Reading(engines=engines, process_start=start, model=model), at


def _restart_reason(prev: Reading, cur: Reading) -> str | None:
    """Why `cur` cannot come from the process that produced `prev`, or None if it can."""
    if prev.process_start is not None and cur.process_start is not None:
        if abs(prev.process_start - cur.process_start) > 0.5:
            return "process start time changed"
    for name, c in cur.engines.items():
        p = prev.engines.get(name)
        if p is None:
            continue
        if p.created is not None and c.created is not None and abs(p.created - c.created) > 1e-3:
            return "counters were re-created"
        for f in COUNTER_FIELDS:
            a, b = getattr(p, f), getattr(c, f)
            if a is not None and b is not None and b < a - 1e-9:
                return "counters went backwards"
    return None


def _footprint(state: dict[str, Any]) -> dict[str, float]:
    raw = state.get("probe")
    if not isinstance(raw, dict):
        return {}
    try:
        p = max(float(raw.get("prompt_tokens", 0)), 0.0)
        c = max(float(raw.get("completion_tokens", 0)), 0.0)
    except (TypeError, ValueError):
        return {}
    if not (math.isfinite(p) and math.isfinite(c)):
        return {}
    return _probe_moves(p, c)


def _probe_moves(p: float, c: float) -> dict[str, float]:
    """What one probe of p prompt and c generated tokens can move: at most c+1 steps, one finished request."""
    return {"prompt_tokens": p, "generation_tokens": c, "steps": c + 1, "step_tokens": p + c + 1, "finished": 1.0}


def _progressed(p: EngineReading, c: EngineReading, footprint: dict[str, float]) -> bool:
    """Did any progress signal move by more than the check's own probe could explain?"""
    for f in PROGRESS_FIELDS:
        a, b = getattr(p, f), getattr(c, f)
        if a is None or b is None:
            continue
        if f == "kv_cache":
            if abs(b - a) > 1e-9 and (c.work > 0 or p.work > 0):
                return True
        elif b - a > footprint.get(f, 0.0) + 1e-9:
            return True
    return False


def _comparable(p: EngineReading, c: EngineReading) -> bool:
    """Is there any progress signal present in both readings? Without one, no-progress proves nothing."""
    return any(getattr(p, f) is not None and getattr(c, f) is not None for f in PROGRESS_FIELDS)


def _rate(prev: Reading, cur: Reading, f: str, gap: float, own: float = 0.0) -> float | None:
    """Per-second growth of counter `f` over all engines, less what our own probe (`own`) added."""
    deltas = [
        getattr(c, f) - getattr(prev.engines[n], f)
        for n, c in cur.engines.items()
        if n in prev.engines and getattr(c, f) is not None and getattr(prev.engines[n], f) is not None
    ]
    if not deltas or gap <= 0:
        return None
    return max(sum(deltas) - own, 0.0) / gap


def _gauges(reading: Reading) -> dict[str, float | None]:
    kv = [e.kv_cache for e in reading.engines.values() if e.kv_cache is not None]
    return {
        "running": sum(e.running for e in reading.engines.values()),
        "waiting": sum(e.waiting for e in reading.engines.values()),
        "kv_cache": max(kv) * 100.0 if kv else None,
    }


def _fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _label(name: str, reading: Reading) -> str:
    return f"engine {name}" if name and len(reading.engines) > 1 else ""


# --------------------------------------------------------------------------- the decisions


def assess(state: dict[str, Any] | None, reading: Reading, settings: Settings, now: float) -> Verdict:
    """Judge a fresh /metrics reading against the previous state."""
    state = dict(state or {})
    state.pop("unresponsive", None)
    g = _gauges(reading)
    base = _baseline(state)

    if base is not None:
        prev, at = base
        why = _restart_reason(prev, reading)
        if why:
            return _restarted(state, reading, why, g, now)
        if not (0.0 <= now - at <= settings.max_age):
            base = None  # stale, or the clock jumped: compare with nothing rather than guess

    if all(e.asleep for e in reading.engines.values()):
        new = _keep(state, reading, now, stall={})
        return _finish(new, "sleeping", OK, "engine asleep, not probed", g, engines={n: "sleeping" for n in reading.engines})

    if base is None:
        new = _keep(state, reading, now, stall={})
        if reading.work > 0:
            text = f"{_counts(g)} (first reading: progress not yet measured)"
            return _finish(new, "busy", OK, text, g, action="reread", engines={n: "busy" for n in reading.engines})
        return _idle(new, reading, g)

    prev, at = base
    gap = now - at
    footprint = _footprint(state)
    if gap < settings.min_gap and not any(
        n in prev.engines and _progressed(prev.engines[n], e, footprint) for n, e in reading.engines.items()
    ):
        repeated = _too_soon(state, reading, g, gap, now)
        if repeated is not None:
            return repeated

    stall_in = _sub(state, "stall")
    stall: dict[str, dict[str, float]] = {}
    words: dict[str, str] = {}
    for name, cur in reading.engines.items():
        p = prev.engines.get(name)
        if cur.asleep:
            words[name] = "sleeping"
        elif p is not None and _progressed(p, cur, footprint):
            words[name] = "busy" if cur.work > 0 else "idle"
        elif cur.work <= 0:
            words[name] = "idle"
        elif p is None or not _comparable(p, cur):
            words[name] = "busy"  # an engine we have not seen, or no signal on both pages: nothing to compare
        elif gap < settings.min_gap:
            # another engine's progress let this comparison happen; for this one so short a gap proves nothing:
            # its stall neither grows nor ends, and its last word stands
            old = _sub(stall_in, name)
            prior = _sub(_sub(state, "verdict"), "engines").get(name)
            if old and prior in ("stalling", "stuck"):
                stall[name] = {"since": min(_num(old.get("since"), at), now), "count": _num(old.get("count"), 1.0)}
                words[name] = prior
            else:
                words[name] = "busy"
        else:
            old = _sub(stall_in, name)
            since, count = _num(old.get("since"), at), _num(old.get("count"), 0.0)
            if since > now:
                since, count = at, 0.0
            count += 1
            stall[name] = {"since": since, "count": count}
            stuck = count >= settings.stuck_readings and now - since >= settings.stuck_seconds
            words[name] = "stuck" if stuck else "stalling"

    new = _keep(state, reading, now, stall=stall)
    rates = {
        "tokens_per_second": _rate(prev, reading, "generation_tokens", gap, footprint.get("generation_tokens", 0.0)),
        "prompt_tokens_per_second": _rate(prev, reading, "prompt_tokens", gap, footprint.get("prompt_tokens", 0.0)),
        "steps_per_second": _rate(prev, reading, "steps", gap, footprint.get("steps", 0.0)),
    }
    stalled = max((now - s["since"] for s in stall.values()), default=0.0)
    word = next(w for w in _RANK if w in words.values())
    if word == "sleeping" and any(w == "idle" for w in words.values()):
        word = "idle"
    if word == "idle":
        return _idle(new, reading, g, words, rates)
    state_code = {"stuck": CRITICAL, "stalling": WARNING}.get(word, OK)
    text = _engine_text(words, stall, reading, now, settings) + _counts(g)
    if rates["tokens_per_second"] is not None and word == "busy":
        text += f", {rates['tokens_per_second']:.1f} tok/s"
    return _finish(new, word, state_code, text, g, engines=words, stalled=stalled,
                   tokens_per_second=rates["tokens_per_second"], prompt_tokens_per_second=rates["prompt_tokens_per_second"],
                   steps_per_second=rates["steps_per_second"])


def after_probe(
    verdict: Verdict, probe: Probe, reread: Reading | Failure | None, settings: Settings, now: float
) -> Verdict:
    """Finish an idle verdict with the probe's answer (and, if it failed, a second reading)."""
    state = dict(verdict.new_state)
    if probe.ok:
        state["probe"] = {"prompt_tokens": probe.prompt_tokens, "completion_tokens": probe.completion_tokens, "at": now}
        head = "" if verdict.word == "idle" else verdict.text + "; "
        word = verdict.word
        text = f"{head}probe answered in {probe.seconds:.2f} s"
        return verdict._replace(text=text, word=word, new_state=_remember(state, word, OK, text, now, verdict.engines),
                       probe_seconds=probe.seconds, action=None)
    if probe.refused:
        return assess_failure(state, Failure("down", probe.detail), settings, now)
    if probe.status is not None and 400 <= probe.status < 500:
        text = f"no work, but the probe was rejected: {probe.detail}"
        return verdict._replace(word="idle", state=WARNING, text=text, action=None, probe_seconds=probe.seconds,
                       new_state=_remember(state, "idle", WARNING, text, now, verdict.engines))
    if probe.cut_short and probe.status is None:
        text = (f"no work, the probe got no answer ({probe.detail}) in the time -t left it, "
                f"less than --probe-timeout: not proof of a stall")
        return verdict._replace(word="idle", state=WARNING, text=text, action=None, probe_seconds=probe.seconds,
                       new_state=_remember(state, "idle", WARNING, text, now, verdict.engines))
    # Timed out or 5xx: stuck only if a second reading shows the engine did nothing meanwhile.
    if isinstance(reread, Failure):
        failed = assess_failure(state, reread, settings, now)
        return failed._replace(text=f"{failed.text}; the probe failed too: {probe.detail}")
    base = _baseline(state)
    if reread is None or base is None:
        text = f"no work, the probe failed ({probe.detail}) and there was no second reading"
        return verdict._replace(state=WARNING, text=text, action=None, probe_seconds=probe.seconds,
                       new_state=_remember(state, verdict.word, WARNING, text, now, verdict.engines))
    prev, _ = base
    if _restart_reason(prev, reread):
        return _restarted(state, reread, "process changed during the probe", _gauges(reread), now)
    fp = _probe_moves(FAILED_PROBE_FOOTPRINT["prompt_tokens"], FAILED_PROBE_FOOTPRINT["completion_tokens"])
    moved = [n for n, e in reread.engines.items() if n in prev.engines and _progressed(prev.engines[n], e, fp)]
    g = _gauges(reread)
    new = _keep(state, reread, now, stall={})
    if moved:
        word = "busy" if reread.work > 0 else "idle"
        code = OK if word == "busy" else WARNING
        text = f"{_counts(g)}; the probe got no answer ({probe.detail}) but the engine progressed"
        return _finish(new, word, code, text, g, engines={n: word for n in reread.engines}, probe=probe.seconds)
    text = (f"no progress while a 1-token probe went unanswered ({probe.detail}); "
            f"{_counts(g)}")
    return _finish(new, "stuck", CRITICAL, text, g, engines={n: "stuck" for n in reread.engines},
                   probe=probe.seconds, stalled=probe.seconds)


def assess_failure(
    state: dict[str, Any] | None, failure: Failure, settings: Settings, now: float,
    restart_marker: float | None = None,
) -> Verdict:
    """Judge a run in which /metrics gave no reading (or proxy mode, which never reads it)."""
    state = dict(state or {})
    starting = restart_marker is not None and 0.0 <= now - restart_marker <= settings.start_grace
    if failure.kind == "proxy":
        state.pop("unresponsive", None)
        if failure.models_ok:
            text = f"/v1/models lists {failure.model}" if failure.model else "/v1/models answers"
            return _finish(state, "proxy", OK, text, {}, now=now)
        return _finish(state, "proxy", CRITICAL, f"/v1/models failed: {failure.detail}", {}, now=now)
    if starting and failure.kind in ("down", "unresponsive", "no metrics"):
        state.pop("unresponsive", None)
        text = f"restarted {_fmt_seconds(now - restart_marker)} ago, not serving yet ({failure.detail})"  # type: ignore[operator]
        return _finish(state, "starting", WARNING, text, {}, now=now)
    if failure.kind == "down":
        state.pop("unresponsive", None)
        return _finish(state, "down", CRITICAL, failure.detail, {}, now=now)
    if failure.kind == "unresponsive":
        old = _sub(state, "unresponsive")
        if not 0.0 <= now - _num(_sub(state, "verdict").get("at"), -math.inf) <= settings.max_age:
            old = {}  # a streak from before a long gap (a host reboot, a clock jump) is not this streak
        since, count = _num(old.get("since"), now), _num(old.get("count"), 0.0) + 1
        if since > now:
            since, count = now, 1.0
        state["unresponsive"] = {"since": since, "count": count}
        lasted = now - since
        critical = count >= settings.stuck_readings and lasted >= settings.stuck_seconds
        text = f"{failure.detail} (for {_fmt_seconds(lasted)}, {count:.0f} reading{'s' if count != 1 else ''} in a row)"
        return _finish(state, "unresponsive", CRITICAL if critical else WARNING, text, {}, now=now,
                       stalled=lasted)
    # no metrics: liveness from /v1/models only
    state.pop("unresponsive", None)
    if failure.models_ok:
        tail = f"/v1/models lists {failure.model}" if failure.model else "/v1/models answers"
        return _finish(state, "no metrics", WARNING, f"{failure.detail}; {tail}", {}, now=now)
    return _finish(state, "no metrics", CRITICAL, f"{failure.detail}; /v1/models failed too", {}, now=now)


# --------------------------------------------------------------------------- verdict builders


def _sub(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    """A nested dict of the state, or {} when a hand-edited or foreign file put anything else there."""
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _num(value: Any, default: float) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return out if math.isfinite(out) else default


def _counts(g: dict[str, float | None]) -> str:
    return f"{g['running']:.0f} running, {g['waiting']:.0f} waiting"


def _keep(state: dict[str, Any], reading: Reading, now: float, stall: dict[str, Any]) -> dict[str, Any]:
    new = {k: v for k, v in state.items() if k not in ("reading", "stall", "probe")}
    new["reading"] = _reading_json(reading, now)
    new["stall"] = stall
    return new


def _remember(state: dict[str, Any], word: str, code: int, text: str, now: float,
              engines: Mapping[str, str]) -> dict[str, Any]:
    state = dict(state)
    state["verdict"] = {"word": word, "state": code, "text": text, "at": now, "engines": dict(engines)}
    return state


def _finish(state: dict[str, Any], word: str, code: int, text: str, g: dict[str, float | None], *,
            now: float | None = None, action: str | None = None, engines: dict[str, str] | None = None,
            stalled: float | None = None, probe: float | None = None, **rates: float | None) -> Verdict:
    at = now if now is not None else _num(state.get("reading", {}).get("at"), 0.0)
    return Verdict(
        word=word, state=code, text=text, action=action, engines=engines or {},
        new_state=_remember(state, word, code, text, at, engines or {}),
        running=g.get("running"), waiting=g.get("waiting"), kv_cache=g.get("kv_cache"),
        stalled_seconds=stalled if stalled is not None else (0.0 if g else None),
        probe_seconds=probe, **rates,
    )


def _idle(new: dict[str, Any], reading: Reading, g: dict[str, float | None],
          words: dict[str, str] | None = None, rates: dict[str, float | None] | None = None) -> Verdict:
    return _finish(new, "idle", OK, "no work, not probed", g, action="probe",
                   engines=words or {n: "idle" for n in reading.engines}, **(rates or {}))


def _restarted(state: dict[str, Any], reading: Reading, why: str, g: dict[str, float | None], now: float) -> Verdict:
    new = _keep(state, reading, now, stall={})
    when = ""
    if reading.process_start is not None and now >= reading.process_start:
        stamp = time.strftime("%H:%M:%S", time.localtime(reading.process_start))
        when = f" {_fmt_seconds(now - reading.process_start)} ago (at {stamp})"
    text = f"new process{when}: {why}, new baseline; {_counts(g)}"
    action = "probe" if reading.work <= 0 and not all(e.asleep for e in reading.engines.values()) else None
    return _finish(new, "restarted", OK, text, g, action=action, engines={n: "restarted" for n in reading.engines})


def _too_soon(state: dict[str, Any], reading: Reading, g: dict[str, float | None], gap: float,
              now: float) -> Verdict | None:
    """Runs closer together than min_gap: keep the older baseline and repeat the last verdict.

    An engine whose work is gone since then is no longer busy, stalling or stuck: it reads idle. None when
    there is no work and nothing fit to repeat (work gone since a busy/stalling/stuck verdict, or a verdict
    that was no judgement of progress): with no work a short gap cannot wrongly call anything stalled, so
    the caller judges afresh (and probes).
    """
    last = _sub(state, "verdict")
    word, code = last.get("word"), last.get("state")
    working = ("busy", "stalling", "stuck")
    if word in working and reading.work <= 0:
        return None
    engines = {str(n): str(w) for n, w in _sub(last, "engines").items()}
    for name, e in reading.engines.items():
        if e.work <= 0 and engines.get(name) in working:
            engines[name] = "idle"
        elif e.work > 0 and engines.get(name) not in working:
            engines[name] = "busy"  # work arrived: not proven either way before the next comparison
    if word in working or (word == "idle" and reading.work > 0):
        word = next(w for w in _RANK if w in engines.values())
        code = {"stuck": CRITICAL, "stalling": WARNING}.get(word, OK)
    if word not in (*working, "idle", "restarted") or code not in (OK, WARNING, CRITICAL):
        if reading.work <= 0:
            return None  # nothing worth repeating (down, a failed probe...): judge afresh
        word, code = "busy", OK
    text = f"{_counts(g)} (verdict of {_fmt_seconds(gap)} ago repeated: too soon to compare)"
    stall = {n: s for n, s in _sub(state, "stall").items() if engines.get(n) in ("stuck", "stalling")}
    stalled = max((now - _num(s.get("since"), now) for s in stall.values() if isinstance(s, dict)), default=0.0)
    return Verdict(word=word, state=code, text=text, new_state=state, engines=engines,
                   running=g["running"], waiting=g["waiting"], kv_cache=g["kv_cache"], stalled_seconds=stalled)


def _engine_text(words: dict[str, str], stall: dict[str, dict[str, float]], reading: Reading,
                 now: float, settings: Settings) -> str:
    """Name the engines that are not well, with how long and over how many readings."""
    parts = []
    several = len(reading.engines) > 1
    for name, word in sorted(words.items()):
        if word not in ("stuck", "stalling"):
            continue
        s = stall[name]
        e = reading.engines[name]
        need = "" if word == "stuck" else (
            f" (stuck at {settings.stuck_readings} readings and {_fmt_seconds(settings.stuck_seconds)})")
        readings = f"{s['count']:.0f} reading{'s' if s['count'] != 1 else ''}"
        where = f"engine {name} with {e.running:.0f} running, {e.waiting:.0f} waiting: " if several else ""
        parts.append(f"{where}no progress for {_fmt_seconds(now - s['since'])} over {readings}{need}")
    if several and parts:
        parts.extend(f"engine {n} {w}" for n, w in sorted(words.items()) if w not in ("stuck", "stalling"))
        return "; ".join(parts) + "; total "
    return "; ".join(parts) + ("; " if parts else "")
