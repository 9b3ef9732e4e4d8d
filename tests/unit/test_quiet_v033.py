"""vLLM 0.33/0.34's quiet on purpose (issue 37), fed through the judge as the check feeds it: a probe turned away
as paused (judge.quiet.turned_away), a checkpoint's state, an engine held for fault recovery (on_purpose with the
fault-tolerance status), and the probe that tells a deferred wait from a hang (judge.quiet.deferred)."""

from __future__ import annotations

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import (
    ANSWERED,
    ENGINE_PAUSED,
    NO_ANSWER,
    NO_PAUSE_ROUTE,
    REJECTED,
    Checkpoint,
    EngineFault,
    EngineReading,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.vocab import (
    CRITICAL,
    IDLE,
    KV_TRANSFER,
    OK,
    PAUSED,
    PROBE,
    PROBE_DEFERRED,
    STALLING,
    STUCK,
    WARNING,
)
from check_vllm.judge.assess import assess
from check_vllm.judge.quiet import asks_checkpoint, asks_faults, deferred, on_purpose, turned_away

S = Settings(stuck_readings=2, stuck_seconds=20.0, min_gap=1.0, pause_grace=60.0, recovery_window=120.0)
START = 1_700_000_000.0
TURNED = ProbeOutcome(ENGINE_PAUSED, 0.02, "completion answered HTTP 503: Generation is paused.", status=503)


def at(t: float) -> Instant:
    return Instant(START + 100 + t, 500.0 + t, "boot")


def engine(running: float = 0.0, waiting: float = 0.0, deferred_: float | None = None, steps: float = 100.0):
    return EngineReading(running=running, waiting=waiting, steps=steps, step_tokens=900.0, generation_tokens=800.0,
                         prompt_tokens=100.0, finished=10.0, kv_cache=0.3, deferred=deferred_)


def page(*engines: EngineReading) -> Reading:
    return Reading(engines={str(i): e for i, e in enumerate(engines)}, process_start=START, model="m")


def test_a_probe_turned_away_as_paused_is_paused_ok_then_warning_past_the_grace_never_stuck():
    idle = page(engine())
    memory, seen = Memory(), []
    for t in range(0, 100, 10):
        v = assess(memory, idle, S, at(t))
        assert (v.word, v.action) == (IDLE, PROBE)
        v = turned_away(v, idle, TURNED, Checkpoint(NO_PAUSE_ROUTE), S, at(t))
        memory = v.memory
        seen.append((v.word, v.code))
    assert seen == [(PAUSED, OK)] * 7 + [(PAUSED, WARNING)] * 3
    assert v.text.startswith("the engine turns requests away as paused (completion answered HTTP 503: Generation is "
                             "paused.) for 90 s, longer than the pause grace 60 s")
    assert memory.no_checkpoint_route == START and not asks_checkpoint(memory, idle)  # a 404: not asked again
    assert asks_checkpoint(memory, idle._replace(process_start=START + 5))  # another process is asked
    again = on_purpose(v, idle, None, S, at(90))
    assert again is v  # the engine's own word stands; nothing clears the pause


def test_a_checkpoint_is_said_by_its_state_and_a_failed_one_is_warning_at_once():
    idle = page(engine())
    v = assess(Memory(), idle, S, at(0))
    prepared = turned_away(v, idle, TURNED, Checkpoint("prepared"), S, at(0))
    assert (prepared.word, prepared.code) == (PAUSED, OK)
    assert prepared.text.startswith("a checkpoint is prepared, waiting for POST /checkpoint/restore")
    preparing = turned_away(v, idle, TURNED, Checkpoint("preparing"), S, at(0))
    assert preparing.text.startswith("a checkpoint is being prepared (GET /checkpoint/status: preparing) for 0.0 s")
    failed = turned_away(v, idle, TURNED, Checkpoint("failed", "boom"), S, at(0))
    assert (failed.word, failed.code) == (PAUSED, WARNING)
    assert failed.text == ("a checkpoint failed (boom) (GET /checkpoint/status: failed): the engine turns every request "
                           "away for good (vLLM refuses to restore or resume it); restart the server; 0 running, "
                           "0 waiting")
    assert failed.memory.no_checkpoint_route is None


def test_an_engine_held_for_recovery_is_stalling_within_the_window_and_stuck_after_it():
    busy = [engine(running=2.0, waiting=1.0, steps=100.0 + t) for t in range(0, 300, 10)]
    frozen = engine(running=2.0, waiting=2.0)
    fault = (EngineFault("1", "unhealthy", "RuntimeError"),)
    memory, words = Memory(), []
    for i, t in enumerate(range(0, 200, 10)):
        r = page(busy[i], frozen)
        v = assess(memory, r, S, at(t))
        assert asks_faults(v, r) == (v.word in (STALLING, STUCK))
        v = on_purpose(v, r, None, S, at(t), fault if v.word in (STALLING, STUCK) else None)
        memory = v.memory
        words.append((t, v.word, v.code))
    assert all(w == STALLING and c == WARNING for t, w, c in words if 10 <= t <= 120), words  # stuck at 20 s else
    assert all(w == STUCK and c == CRITICAL for t, w, c in words if t >= 130), words
    assert v.text.endswith("engine 1 unhealthy (RuntimeError) (fault-tolerance status), past vLLM's 120 s recovery "
                           "window")


def test_no_fault_route_is_remembered_and_a_healthy_status_changes_nothing():
    frozen = page(engine(running=2.0, waiting=2.0))
    first = assess(Memory(), frozen, S, at(0))
    v = assess(first.memory, frozen, S, at(10))
    said = on_purpose(v, frozen, None, S, at(10), NO_PAUSE_ROUTE)
    assert said.word == STALLING and said.memory.no_fault_route == START and not asks_faults(said, frozen)
    healthy = on_purpose(v, frozen, None, S, at(10), ())
    assert healthy.word == STALLING and healthy.memory.no_fault_route is None


def _deferred_stall(t: float, memory: Memory) -> tuple:
    r = page(engine(waiting=3.0, deferred_=3.0))
    v = on_purpose(assess(memory, r, S, at(t)), r, None, S, at(t))
    return v, r


def test_a_deferred_stall_the_probe_answers_is_kv_transfer_and_its_streak_ends():
    first, _ = _deferred_stall(0, Memory())
    second, _ = _deferred_stall(10, first.memory)
    v, r = _deferred_stall(30, second.memory)
    assert (v.word, v.action) == (STUCK, PROBE_DEFERRED)  # proven: only the probe may still explain it
    ok = deferred(v, r, ProbeOutcome(ANSWERED, 0.05, prompt_tokens=2.0, completion_tokens=1.0), None, S, at(30))
    assert (ok.word, ok.code, ok.memory.stalls) == (KV_TRANSFER, WARNING, {})
    assert ok.text.endswith("probe answered in 0.05 s: the engine lives, its waiting work waits on that; "
                            "0 running, 3 waiting")
    moved = r._replace(engines={"0": r.engines["0"]._replace(steps=101.0)})
    late = deferred(v, r, ProbeOutcome(NO_ANSWER, 10.0, "timed out"), moved, S, at(30))
    assert late.word == KV_TRANSFER  # a late answer is an answer


def test_a_deferred_stall_the_probe_cannot_reach_is_stuck_once_proven():
    first, _ = _deferred_stall(0, Memory())
    v, r = _deferred_stall(10, first.memory)
    unanswered = deferred(v, r, ProbeOutcome(NO_ANSWER, 10.0, "timed out"), r, S, at(10))
    assert (unanswered.word, unanswered.code) == (STALLING, WARNING)  # not yet proven: 10 s of 20
    v, r = _deferred_stall(30, unanswered.memory)
    stuck = deferred(v, r, ProbeOutcome(NO_ANSWER, 10.0, "timed out"), r, S, at(30))
    assert (stuck.word, stuck.code) == (STUCK, CRITICAL)
    assert stuck.text.endswith("every waiting request is deferred, and a 1-token probe went unanswered (timed out) "
                               "with nothing moving")
    rejected = deferred(v, r, ProbeOutcome(REJECTED, 0.1, "HTTP 400"), None, S, at(30))
    assert (rejected.word, rejected.code) == (STUCK, CRITICAL)  # proves nothing: never beyond the window unprobed
