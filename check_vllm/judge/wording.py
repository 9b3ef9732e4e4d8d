"""How verdicts read: the status texts an operator sees after the word. Pure string building.

Kept apart from the judging so that a change of wording cannot change a decision, and the golden
tests (tests/e2e/test_golden.py) pin every line.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Streak
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import EngineFault, Reading
from check_vllm.contract.vocab import STALLING, STUCK
from check_vllm.judge.compare import Gauges
from check_vllm.judge.proof import lasted

#: Beyond this many sick engines the status line names the first few and counts the rest.
NAMED_ENGINES = 3


def seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def counts(g: Gauges) -> str:
    return f"{g.running:.0f} running, {g.waiting:.0f} waiting"


def readings(count: float) -> str:
    return f"{count:.0f} reading{'s' if count != 1 else ''}"


def first_reading(g: Gauges) -> str:
    return f"{counts(g)} (first reading: progress not yet measured)"


def repeated(g: Gauges, gap: float) -> str:
    return f"{counts(g)} (verdict of {seconds(gap)} ago repeated: too soon to compare)"


def restarted(reading: Reading, why: str, g: Gauges, now: float) -> str:
    when = ""
    if reading.process_start is not None and now >= reading.process_start:
        stamp = time.strftime("%H:%M:%S", time.localtime(reading.process_start))
        when = f" {seconds(now - reading.process_start)} ago (at {stamp})"
    return f"new process{when}: {why}, new baseline; {counts(g)}"


def _need(word: str, settings: Settings) -> str:
    return "" if word == STUCK else (
        f" (stuck at {settings.stuck_readings} readings and {seconds(settings.stuck_seconds)})")


def _order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def _stall(s: Streak, now: Instant) -> str:
    return f"no progress for {seconds(lasted(s, now))} over {readings(s.readings)}"


def engines(words: Mapping[str, str], stalls: Mapping[str, Streak], reading: Reading, now: Instant,
            settings: Settings) -> str:
    """Name the engines that are not well, with how long and over how many readings; many are summarised."""
    sick = sorted((n for n, w in words.items() if w in (STUCK, STALLING)), key=_order)
    if not sick:
        return ""
    if len(reading.engines) <= 1:
        return f"{_stall(stalls[sick[0]], now)}{_need(words[sick[0]], settings)}; "
    if len(sick) > NAMED_ENGINES:
        return _many(words, sick, stalls, now, settings)
    parts = []
    for name in sick:
        e = reading.engines[name]
        parts.append(f"engine {clean(name, 20)} with {e.running:.0f} running, {e.waiting:.0f} waiting: "
                     f"{_stall(stalls[name], now)}{_need(words[name], settings)}")
    others = sorted((n for n in words if n not in sick), key=_order)
    if len(others) <= NAMED_ENGINES:
        parts.extend(f"engine {clean(n, 20)} {words[n]}" for n in others)
    else:
        parts.append(f"{len(others)} other engines {', '.join(sorted({words[n] for n in others}))}")
    return "; ".join(parts) + "; total "


def _many(words: Mapping[str, str], sick: list[str], stalls: Mapping[str, Streak], now: Instant,
          settings: Settings) -> str:
    """'12 of 64 engines stalling: 3, 7, 9 ... and 9 more': a bounded line however many engines."""
    worst = STUCK if any(words[n] == STUCK for n in sick) else STALLING
    named = ", ".join(clean(n, 20) for n in sick[:NAMED_ENGINES])
    longest = max(sick, key=lambda n: lasted(stalls[n], now))
    return (f"{len(sick)} of {len(words)} engines {worst}: {named} ... and {len(sick) - NAMED_ENGINES} more; "
            f"longest {_stall(stalls[longest], now)} (engine {clean(longest, 20)}){_need(worst, settings)}; total ")


def weights_stand(in_flight: float, idle_for: float) -> str:
    """A weight update whose operations stopped finishing: no transfer moves, whatever the gauge says."""
    return (f"{in_flight:g} weight-update operations in flight, none finished for {seconds(idle_for)} "
            "(vllm:rl_weight_update_operations_total): no transfer moves; ")


def coarse(reading: Reading) -> str:
    """What its page printed too coarsely to prove a stall: progress cannot be told, so no stall is judged."""
    said = sorted({e.coarse for e in reading.engines.values() if e.coarse and e.work > 0})
    return f"; progress cannot be told ({'; '.join(said)})" if said else ""


def models(model: str | None) -> str:
    return f"/v1/models lists {clean(model, 80)}" if model else "/v1/models answers"


def unresponsive(detail: str, streak: Streak, now: Instant) -> str:
    return f"{detail} (for {seconds(lasted(streak, now))}, {readings(streak.readings)} in a row)"


def paused(how: str, span: float, grace: float, g: Gauges) -> str:
    over = f", longer than the pause grace {seconds(grace)}: still paused on purpose, never restarted" \
        if span > grace else ""
    return f"{how} for {seconds(span)}{over}; {counts(g)}"


def holds_itself(said: str, span: float, grace: float) -> str:
    over = f", longer than the pause grace {seconds(grace)}: still on purpose, never restarted" if span > grace else ""
    return f"its server says it holds itself: {said}, for {seconds(span)}{over}"


#: What vLLM's "deferred" waiting reason covers (its help text of vllm:num_requests_waiting_by_reason).
DEFERRED = ("every waiting request is deferred (vLLM's transient constraints: a KV transfer from a prefill instance, "
            "a LoRA budget, a blocked status such as a structured-output grammar compiling)")


def kv_transfer(g: Gauges, why: str = "") -> str:
    probe = f"; the probe proved nothing: {why}" if why else ""
    return f"{DEFERRED}, no progress, not yet proven stuck{probe}; {counts(g)}"


def deferred_alive(g: Gauges, secs: float, answered: bool) -> str:
    how = probe_answered("", secs) if answered else "the engine moved while the probe was out"
    return f"{DEFERRED}; {how}: the engine lives, its waiting work waits on that; {counts(g)}"


def deferred_unanswered(text: str, detail: str) -> str:
    return f"{text}; {DEFERRED.split(' (')[0]}, and a 1-token probe went unanswered ({detail}) with nothing moving"


def deferred_unprobed(text: str, why: str) -> str:
    how = f"the probe proved nothing: {why}" if why else "no probe was sent to tell a wait from a hang"
    return f"{text}; {DEFERRED.split(' (')[0]}, proven past the proof window, {how}"


#: What GET /checkpoint/status states say (vllm/v1/engine/__init__.py CheckpointState).
_CHECKPOINT = {
    "preparing": "a checkpoint is being prepared (GET /checkpoint/status: preparing)",
    "prepared": "a checkpoint is prepared, waiting for POST /checkpoint/restore (GET /checkpoint/status: prepared)",
    "restoring": "a checkpoint is being restored (GET /checkpoint/status: restoring)",
}


def turned_away(detail: str, state: str, error: str) -> str:
    if state == "failed":
        why = f" ({clean(error, 120)})" if error else ""
        return (f"a checkpoint failed{why} (GET /checkpoint/status: failed): the engine turns every request away "
                "for good (vLLM refuses to restore or resume it); restart the server")
    return _CHECKPOINT.get(state, f"the engine turns requests away as paused ({detail})")


def recovering(held: tuple[EngineFault, ...], span: float, window: float, within: bool) -> str:
    named = ", ".join(f"engine {f.engine} {f.status}" + (f" ({f.info})" if f.info else "") for f in held[:NAMED_ENGINES])
    more = f" and {len(held) - NAMED_ENGINES} more" if len(held) > NAMED_ENGINES else ""
    if within:
        return (f"{named}{more} (fault-tolerance status), held for recovery: {seconds(span)} of vLLM's "
                f"{seconds(window)} recovery window, not proven stuck before it ends")
    return f"{named}{more} (fault-tolerance status), past vLLM's {seconds(window)} recovery window"


def balancer(evidence: str) -> str:
    return (f"/metrics comes from more than one server process in turn (this reading continues {evidence}): "
            "the URL looks like a load balancer; check it with --proxy, and check each backend directly")


# --------------------------------------------------------------------------- the idle probe

NOT_PROBED = "no work, not probed"


def lagging(g: Gauges) -> str:
    """Idle by its counters while gauges written only now and then (SGLang's) still show work."""
    return f"no progress; its gauges ({counts(g).lstrip(', ')}) are written only now and then: not probed"
ASLEEP = "engine asleep, not probed"
#: A server that unloaded its model when idle and reloads it on the next request (llama.cpp's sleep).
DOZING = "asleep: its server unloaded the model when idle and reloads it on the next request; not probed"


def sleeps_after(seconds_idle: float) -> str:
    return f"no work; its server sleeps after {seconds_idle:g} s idle and a probe would keep it awake: not probed"


def probe_answered(head: str, secs: float) -> str:
    return f"{head}probe answered in {secs:.2f} s"


def probe_rejected(detail: str) -> str:
    return f"no work, but the probe was rejected: {detail}"


def probe_cut_short(detail: str) -> str:
    return (f"no work, the probe got no answer ({detail}) in the time -t left it, "
            f"less than --probe-timeout: not proof of a stall")


def probe_no_reread(detail: str) -> str:
    return f"no work, the probe failed ({detail}) and there was no second reading"


def probe_unanswered_progress(g: Gauges, detail: str) -> str:
    return f"{counts(g)}; the probe got no answer ({detail}) but the engine progressed"


def probe_unanswered(g: Gauges, detail: str, streak: Streak, now: Instant, settings: Settings, stuck: bool) -> str:
    need = "" if stuck else _need(STALLING, settings)
    return (f"no progress while a 1-token probe went unanswered ({detail}), for {seconds(lasted(streak, now))} "
            f"over {readings(streak.readings)}{need}; {counts(g)}")


def probe_pending(g: Gauges, streak: Streak, now: Instant) -> str:
    return (f"nothing moved since a 1-token probe went unanswered {seconds(lasted(streak, now))} ago "
            f"({readings(streak.readings)}), not probed again yet; {counts(g)}")
