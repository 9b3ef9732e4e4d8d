"""An engine quiet on purpose (issue 29), fed through the judge as the check feeds it: assess, then
judge.quiet.on_purpose with what GET /is_paused said. Paused for a weight update, or waiting on a KV transfer,
is never stuck and never restartable; a real stall after it is proven from its own start."""

from __future__ import annotations

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import NO_PAUSE_ROUTE, PAUSE_UNKNOWN, PAUSED_NO, PAUSED_YES, EngineReading, Reading
from check_vllm.contract.vocab import (
    BY_WORD,
    CRITICAL,
    KV_TRANSFER,
    OK,
    PAUSED,
    PROBE_DEFERRED,
    RESTARTABLE,
    STALLING,
    STUCK,
    WARNING,
)
from check_vllm.judge.assess import assess
from check_vllm.judge.quiet import asks_server, deferred, on_purpose
from check_vllm.server.reading import parse

S = Settings(stuck_readings=2, stuck_seconds=20.0, min_gap=1.0, pause_grace=60.0)
START = 1_700_000_000.0


def at(t: float) -> Instant:
    return Instant(START + 100 + t, 500.0 + t, "boot")


def frozen(running: float = 2.0, waiting: float = 2.0, deferred: float | None = None, start: float = START,
           weights: float | None = None) -> Reading:
    e = EngineReading(running=running, waiting=waiting, steps=100.0, step_tokens=900.0, generation_tokens=800.0,
                      prompt_tokens=100.0, finished=10.0, kv_cache=0.3, deferred=deferred)
    return Reading(engines={"0": e}, process_start=start, model="m", weight_updates=weights)


def run(memory: Memory, reading: Reading, t: float, said: str | None):
    """One run: assess, then (only where the judge asks) what /is_paused said."""
    v = assess(memory, reading, S, at(t))
    asked = asks_server(v, reading)
    return on_purpose(v, reading, said if asked else None, S, at(t)), asked


def test_a_paused_engine_is_paused_never_stuck_and_a_stall_after_it_is_proven_afresh():
    memory, seen = Memory(), []
    for t in range(0, 100, 10):  # 90 s of no progress with work present: stuck after 20 s, were it not paused
        v, asked = run(memory, frozen(), t, PAUSED_YES)
        memory = v.memory
        seen.append((v.word, v.code, asked))
    assert seen[0] == ("busy", OK, False)  # the first reading compares with nothing: no stall, no question
    assert all(word == PAUSED for word, _, _ in seen[1:]), seen
    assert [code for _, code, _ in seen[1:]] == [OK] * 7 + [WARNING] * 2  # past the 60 s grace: said plainly
    assert v.text.startswith("its server says the engine is paused (GET /is_paused) for 80 s, longer than the "
                             "pause grace 60 s: still paused on purpose, never restarted; 2 running, 2 waiting")
    assert PAUSED not in RESTARTABLE and BY_WORD[PAUSED].states == (OK, WARNING)
    resumed, _ = run(memory, frozen(), 100, PAUSED_NO)  # /resume, still no progress: the proof starts now
    assert (resumed.word, resumed.code, resumed.memory.paused) == (STALLING, WARNING, None)
    later, _ = run(resumed.memory, frozen(), 115, PAUSED_NO)
    assert later.word == STALLING  # 15 s of stall: not yet the 20 s proof
    stuck, _ = run(later.memory, frozen(), 125, PAUSED_NO)
    assert (stuck.word, stuck.code) == (STUCK, CRITICAL)


def test_weights_in_flight_say_paused_without_asking():
    first, _ = run(Memory(), frozen(weights=1.0), 0, None)
    v, asked = run(first.memory, frozen(weights=1.0), 10, None)
    assert (v.word, v.code, asked) == (PAUSED, OK, False)
    assert v.text.startswith("weights are moving in (vllm:rl_weight_update_operations_in_flight) for 0.0 s")


def test_a_server_without_the_route_is_not_asked_again_until_its_process_changes():
    first, _ = run(Memory(), frozen(), 0, None)
    v, asked = run(first.memory, frozen(), 10, NO_PAUSE_ROUTE)
    assert asked and v.word == STALLING and v.memory.no_pause_route == START
    again, asked = run(v.memory, frozen(), 20, NO_PAUSE_ROUTE)
    assert not asked and again.word == STUCK  # a 404 proves nothing: the stall is what it is
    unknown, asked = run(first.memory, frozen(), 10, PAUSE_UNKNOWN)
    assert asked and unknown.memory.no_pause_route is None  # an error says nothing, and is asked again
    other = frozen(start=START + 50)
    assert asks_server(assess(again.memory, other, S, at(30))._replace(word=STALLING), other)


def test_progress_never_asks():
    first, _ = run(Memory(), frozen(), 0, None)
    moving = frozen()._replace(engines={"0": frozen().engines["0"]._replace(steps=200.0)})
    v, asked = run(first.memory, moving, 10, PAUSED_YES)
    assert (v.word, asked) == ("busy", False)


def test_waiting_work_all_deferred_holds_as_kv_transfer_only_while_unproven_and_asks_for_a_probe():
    """Issue 37: "deferred" gauges are the scheduler's last word; unprobed, kv transfer holds only within the proof
    window (judge.quiet.deferred, tests/unit/test_quiet_v033.py for the probe's outcomes)."""
    first, _ = run(Memory(), frozen(running=0.0, waiting=3.0, deferred=3.0), 0, None)
    v, _ = run(first.memory, frozen(running=0.0, waiting=3.0, deferred=3.0), 10, NO_PAUSE_ROUTE)
    assert (v.word, v.action) == (STALLING, PROBE_DEFERRED) and v.memory.stalls  # the probe tells; the streak goes on
    held = deferred(v, frozen(running=0.0, waiting=3.0, deferred=3.0), None, None, S, at(10))
    assert (held.word, held.code) == (KV_TRANSFER, WARNING), held.summary
    assert held.text.startswith("every waiting request is deferred (vLLM's transient constraints: a KV transfer")
    assert "restart" not in held.text and KV_TRANSFER not in RESTARTABLE
    later, _ = run(held.memory, frozen(running=0.0, waiting=3.0, deferred=3.0), 30, NO_PAUSE_ROUTE)
    stuck = deferred(later, frozen(running=0.0, waiting=3.0, deferred=3.0), None, None, S, at(30))
    assert (stuck.word, stuck.code) == (STUCK, CRITICAL)  # proven, and never probed: the stall stands
    decoding, _ = run(Memory(), frozen(running=1.0, waiting=3.0, deferred=3.0), 0, None)
    memory = decoding.memory
    for t in (10, 20, 30):
        v, _ = run(memory, frozen(running=1.0, waiting=3.0, deferred=3.0), t, NO_PAUSE_ROUTE)
        memory = v.memory
    assert (v.word, v.code, v.action) == (STUCK, CRITICAL, None)  # running work on the decode side that does not move


def test_the_page_carries_the_deferred_and_weight_gauges():
    page = "\n".join([
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0',
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 0.0',
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 3.0',
        'vllm:iteration_tokens_total_count{engine="0",model_name="m"} 5.0',
        'vllm:rl_weight_update_operations_in_flight{operation="update_weights"} 1.0',
        'vllm:rl_weight_update_operations_in_flight{operation="init_weight_transfer_engine"} 0.0',
        "",
    ])
    r = parse(page)
    assert r.engines["0"].deferred == 3.0 and r.weight_updates == 1.0
    assert parse(page.replace("3.0\nvllm:iter", "3.0\nvllm:iter").replace("rl_weight", "xx_weight")).weight_updates \
        is None


def test_asleep_with_work_queued_is_sleeping_never_probed_and_waking_is_judged_afresh():
    asleep = frozen()._replace(engines={"0": frozen().engines["0"]._replace(asleep=True)})
    first = assess(Memory(), asleep, S, at(0))
    v = assess(first.memory, asleep, S, at(30))  # work queued, nothing moves for 30 s: asleep, not a stall
    assert (first.word, first.action, v.word, v.code, v.action) == ("sleeping", None, "sleeping", OK, None)
    assert not asks_server(v, asleep)
    woken = frozen(running=0.0, waiting=0.0)  # /wake_up: awake, idle
    idle = assess(v.memory, woken, S, at(40))
    assert (idle.word, idle.action) == ("idle", "probe")  # probed only once awake


def _weights(ops: float | None) -> Reading:
    return frozen(weights=1.0)._replace(weight_ops=ops)


def test_a_weight_update_whose_operations_keep_finishing_is_paused_for_ever():
    """A long update (many `update` operations): each run some finish. Never past the grace, never CRITICAL."""
    memory, seen = Memory(), []
    for n, t in enumerate(range(0, 300, 10)):
        v, _ = run(memory, _weights(100.0 + n), t, None)
        memory = v.memory
        seen.append((v.word, v.code))
    assert all(s == (PAUSED, OK) for s in seen[1:]), seen
    assert v.text.startswith("weights are moving in (vllm:rl_weight_update_operations_in_flight) for 0.0 s")


def test_a_weight_update_none_of_whose_operations_finish_is_a_stall_past_the_pause_grace():
    """A trainer that died inside an update leaves the gauge at 1 and the workers in a collective with no time-out:
    paused within the 60 s grace from the last finished operation, then judged as any stall: stuck, restartable."""
    memory, seen = Memory(), []
    for t in range(0, 130, 10):
        v, _ = run(memory, _weights(100.0 if t else 99.0), t, None)
        memory = v.memory
        seen.append((t, v.word, v.code))
    words = {t: (w, c) for t, w, c in seen}
    assert all(words[t] == (PAUSED, OK) for t in range(10, 70, 10)), seen  # the last op finished at t=10
    assert words[80] == (STALLING, WARNING), seen  # 70 s without one: past the grace, the stall's proof begins
    assert words[120] == (STUCK, CRITICAL) and STUCK in RESTARTABLE, seen
    assert v.text.startswith("1 weight-update operations in flight, none finished for 110 s "
                             "(vllm:rl_weight_update_operations_total): no transfer moves; "), v.text
    assert "weights are moving in" not in v.text


def test_the_page_carries_the_finished_weight_operations_summed():
    page = "\n".join([
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
        'vllm:iteration_tokens_total_count{engine="0",model_name="m"} 5.0',
        'vllm:rl_weight_update_operations_total{operation="update",outcome="success"} 7.0',
        'vllm:rl_weight_update_operations_total{operation="start",outcome="success"} 2.0',
        "",
    ])
    assert parse(page).weight_ops == 9.0 and parse(page.replace("_total{", "_xx{")).weight_ops is None
