"""The server's life outside the check's own restarts, as tables: a process the host sees starting is
`starting` (whoever started it) within --start-grace, `down` past it; one that served and now refuses while
it lives is `stopping` within --stop-grace, `down` past it; and a crash loop is `down` whatever
the age of its newest process. Identity is PID + start ticks + boot: a reused PID or a reboot is another
process. An old baseline of the same process still proves a stall. Pure: no I/O."""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import NO_PROCESS, Memory, Stopping
from check_vllm.contract.values import (
    MODELS_ANSWERED,
    MODELS_OK,
    EngineReading,
    Evidence,
    Failure,
    Reading,
    ServerProcess,
    Witness,
)
from check_vllm.contract.vocab import (
    CRITICAL,
    DOWN,
    LOOK_AGAIN,
    NO_METRICS,
    OK,
    PROTOCOL,
    STARTING,
    STOPPING,
    UNKNOWN,
    UNRESPONSIVE,
    WARNING,
)
from check_vllm.judge.assess import assess
from check_vllm.judge.no_reading import assess_failure
from check_vllm.memory import codec

S = Settings(stuck_readings=2, stuck_seconds=120.0, min_gap=2.0, max_age=3600.0, start_grace=900.0)
WALL0, BOOT0 = 1_700_000_000.0, 5_000.0  # wall and boot-time clocks at t=0
BOOT = "boot-a"
REFUSED = Failure(DOWN, "connection refused")


def at(t: float, boot: str = BOOT, wall_step: float = 0.0) -> Instant:
    return Instant(WALL0 + t + wall_step, BOOT0 + t, boot)


def proc(pid: int, started_t: float, boot: str = BOOT, ticks: int | None = None) -> Witness:
    started = at(started_t, boot)
    return Witness(ServerProcess(pid, ticks if ticks is not None else int((BOOT0 + started_t) * 100), started,
                                 "command line"))


def reading(steps: float = 100.0, running: float = 1.0, start: float = WALL0 - 1000) -> Reading:
    e = EngineReading(running=running, steps=steps, step_tokens=steps, generation_tokens=steps, prompt_tokens=10.0,
                      finished=1.0, kv_cache=0.1)
    return Reading(engines={"0": e}, process_start=start, model="tiny")


def judge(memory: Memory, t: float, witness: Witness | None, failure: Failure = REFUSED, settings: Settings = S,
          now: Instant | None = None):
    return assess_failure(memory, Evidence(failure, witness), settings, now or at(t))


@pytest.mark.parametrize("kind", [DOWN, UNRESPONSIVE, NO_METRICS])
def test_a_young_process_that_has_not_served_is_starting_whoever_started_it(kind):
    v = judge(Memory(), 35.0, proc(1234, 0.0), Failure(kind, "connection refused"))
    assert (v.word, v.code) == (STARTING, WARNING)
    assert v.text.startswith("vLLM process 1234 started 35 s ago, not serving yet (grace 900 s")


def test_past_the_grace_a_process_that_never_served_is_down():
    v = judge(Memory(), 901.0, proc(1234, 0.0))
    assert (v.word, v.code) == (DOWN, CRITICAL)
    assert v.text.startswith("not serving 901 s after its start (vLLM process 1234, grace 900 s")


def test_no_process_at_all_is_down_and_no_witness_keeps_the_old_rule():
    assert (judge(Memory(), 10.0, Witness()).word, judge(Memory(), 10.0, Witness()).code) == (DOWN, CRITICAL)
    assert judge(Memory(), 10.0, None).text == "connection refused"  # a remote URL: as before
    # no process seen (a wrapper, a container's own PID namespace): the handler's marker still counts
    marked = assess_failure(Memory(), Evidence(REFUSED, Witness(), WALL0), S, at(10.0))
    assert (marked.word, marked.code) == (STARTING, WARNING)


def test_a_process_that_served_and_then_refuses_is_stopping_then_down_after_the_stop_grace():
    served = assess(Memory(), reading(), S, at(100.0))  # the process started at 0 served at 100
    first = judge(served.memory, 130.0, proc(1234, 0.0))  # SIGTERM: vLLM closes its listener first
    assert (first.word, first.code) == (STOPPING, WARNING)
    assert first.text == ("vLLM process 1234 served and still lives, refusing for 0.0 s (grace 120 s; "
                          "connection refused)")
    later = judge(first.memory, 130.0 + S.stop_grace, proc(1234, 0.0))  # counted from the first refusal
    assert (later.word, later.code) == (STOPPING, WARNING)
    dead = judge(later.memory, 131.0 + S.stop_grace, proc(1234, 0.0))  # a listener dead under a live process
    assert (dead.word, dead.code) == (DOWN, CRITICAL)
    assert dead.text.startswith("refusing 121 s while vLLM process 1234 lives (it served; stop grace 120 s")


def test_stopping_is_only_for_refused_connections_and_ends_with_the_process():
    served = assess(Memory(), reading(), S, at(100.0))
    silent = judge(served.memory, 130.0, proc(1234, 0.0), Failure(UNRESPONSIVE, "timed out"))
    assert silent.word == UNRESPONSIVE  # an answer that does not come is the proof's, not a stop
    stopping = judge(served.memory, 130.0, proc(1234, 0.0))
    restarted = judge(stopping.memory, 150.0, proc(2222, 145.0))  # supervisord started the next one
    assert (restarted.word, restarted.code, restarted.memory.stopping) == (STARTING, WARNING, None)
    back = assess(stopping.memory, reading(start=WALL0 + 145.0), S, at(200.0))
    assert back.memory.stopping is None
    # a stop seen before is no head start for another process that served and then refuses
    other = judge(stopping.memory._replace(baseline=back.memory.baseline), 200.0 + S.stop_grace, proc(2222, 145.0))
    assert (other.word, other.code) == (STOPPING, WARNING)


def test_a_stopped_process_that_exited_is_still_stopping_until_the_next_starts_within_the_grace():
    served = assess(Memory(), reading(), S, at(100.0))
    stopping = judge(served.memory, 130.0, proc(1234, 0.0))
    draining = judge(stopping.memory, 200.0, proc(1234, 0.0))  # a long drain: the grace counts from 130
    assert draining.memory.stopping == stopping.memory.stopping
    gone = judge(draining.memory, 205.0, Witness())  # exited; supervisord has not spawned the next one yet
    assert (gone.word, gone.code) == (STOPPING, WARNING)
    assert gone.memory.stopping == stopping.memory.stopping._replace(gone=at(205.0))
    assert gone.text == ("server process 1234 served, stopped and exited, no new process yet; refusing for 75 s "
                         "(grace 120 s; connection refused)")
    still = judge(gone.memory, 205.0 + S.respawn_grace, Witness())  # the gap counts from the first look
    assert (still.word, still.code) == (STOPPING, WARNING)
    over = judge(still.memory, 206.0 + S.respawn_grace, Witness())  # stopped and never started again: down
    assert (over.word, over.code, over.memory.stopping) == (DOWN, CRITICAL, None)
    assert over.text == "connection refused"
    late = judge(draining.memory, 131.0 + S.stop_grace, Witness())  # and never past the stop's own grace
    assert (late.word, late.code) == (DOWN, CRITICAL)
    next_one = judge(gone.memory, 206.0, proc(2222, 205.5))
    assert (next_one.word, next_one.code, next_one.memory.stopping) == (STARTING, WARNING, None)


def test_an_engine_that_died_and_took_its_api_server_down_gracefully_is_down_soon_not_after_the_stop_grace():
    """vLLM 0.27's API server closes its listener and exits when its engine dies: seen once alive and
    refusing, then gone with nothing started in its place. That is a crash: one more look, then down once the
    respawn gap is over, never a stop held for the whole --stop-grace (the release matrix saw 59 s of it)."""
    served = assess(Memory(), reading(), S, at(100.0))
    stopping = judge(served.memory, 130.0, proc(1234, 0.0))
    gone = judge(stopping.memory, 131.0, Witness())
    assert (gone.word, gone.code) == (STOPPING, WARNING)
    down = judge(gone.memory, 132.0 + S.respawn_grace, Witness())
    assert (down.word, down.code) == (DOWN, CRITICAL)
    assert S.respawn_grace < S.stop_grace
    # at a slow cadence the first look that finds it gone still waits for the next one (a restart's gap)
    slow = judge(stopping.memory, 190.0, Witness())
    assert (slow.word, slow.code) == (STOPPING, WARNING)
    assert judge(slow.memory, 250.0, Witness()).word == DOWN
    assert judge(slow.memory, 250.0, proc(2222, 191.0)).word == STARTING


def test_a_stop_and_its_first_look_gone_survive_the_state_file():
    from check_vllm.memory.codec import from_json, to_json

    served = assess(Memory(), reading(), S, at(100.0))
    gone = judge(judge(served.memory, 130.0, proc(1234, 0.0)).memory, 131.0, Witness())
    assert from_json(to_json(gone.memory)).stopping == gone.memory.stopping
    old = to_json(gone.memory)
    del old["stopping"]["gone"]  # a file written before the field: the next look is the first
    assert from_json(old).stopping.gone is None


def test_no_stop_seen_or_a_host_that_cannot_say_leaves_nothing_listening_down():
    served = assess(Memory(), reading(), S, at(100.0))
    crashed = assess_failure(served.memory, Evidence(REFUSED, Witness(), None, True), S, at(130.0))
    assert (crashed.word, crashed.code) == (DOWN, CRITICAL)  # it died between two checks: no stop was seen
    stopping = judge(served.memory, 130.0, proc(1234, 0.0))
    unknown = judge(stopping.memory, 140.0, Witness(error="permission denied"))
    assert (unknown.word, unknown.code) == (DOWN, CRITICAL)
    remote = judge(stopping.memory, 140.0, None)  # a check of a remote URL never saw a stop
    assert (remote.word, remote.code) == (DOWN, CRITICAL)
    silent = judge(stopping.memory, 140.0, Witness(), Failure(UNRESPONSIVE, "timed out"))
    assert silent.word == UNRESPONSIVE  # only refused connections carry the stop on


def test_nothing_listening_and_no_process_right_after_it_was_up_asks_for_a_second_look():
    """A restart's stop-to-start gap (supervisorctl stops, then starts: milliseconds) can fall between a run's
    refused connection and its look at the host (CI's soak saw it once): that look is no verdict yet. It is
    WARNING stopping with LOOK_AGAIN, never a CRITICAL carrying an action; the second look (a second later in
    the same run, or the next run of a caller that cannot wait) finds the next process starting, or none: down.
    A server already down, one never seen up, a host that cannot say and a remote URL are down at once."""
    served = assess(Memory(), reading(), S, at(100.0))
    gap = judge(served.memory, 130.0, Witness())
    assert (gap.word, gap.code, gap.action) == (STOPPING, WARNING, LOOK_AGAIN)
    assert gap.memory.stopping == Stopping(at(130.0), NO_PROCESS, at(130.0))
    second = assess_failure(served.memory, Evidence(REFUSED, proc(2222, 130.5), None, True), S, at(131.0))
    assert (second.word, second.code, second.action) == (STARTING, WARNING, None)
    dead = assess_failure(served.memory, Evidence(REFUSED, Witness(), None, True), S, at(131.0))
    assert (dead.word, dead.code, dead.action, dead.text) == (DOWN, CRITICAL, None, "connection refused")
    # a caller that could not wait (Netdata, the agent, a run out of time): its next run is the second look
    later = judge(gap.memory, 135.0, Witness())
    assert (later.word, later.code, later.action, later.memory.stopping) == (DOWN, CRITICAL, None, None)
    restarted = judge(gap.memory, 135.0, proc(2222, 134.0))
    assert (restarted.word, restarted.code) == (STARTING, WARNING)
    assert judge(dead.memory, 140.0, Witness()).action is None  # already down: no pause on every run
    assert judge(Memory(), 10.0, Witness()).action is None
    assert judge(served.memory, 130.0, Witness(error="permission denied")).action is None
    assert judge(served.memory, 130.0, None).action is None
    silent = judge(served.memory, 130.0, Witness(), Failure(UNRESPONSIVE, "timed out"))
    assert silent.action is None  # only refused connections: an answer that does not come is the proof's
    reset = judge(served.memory, 130.0, None, Failure(PROTOCOL, "GET /metrics: connection reset at once"))
    assert (reset.word, reset.code, reset.action) == (PROTOCOL, UNKNOWN, LOOK_AGAIN)  # a listener closing under it
    assert judge(reset.memory, 135.0, None, Failure(PROTOCOL, "reset")).action is None  # never up since: no look


def test_a_refused_or_dead_probe_goes_through_the_one_door():
    """The probe judges the probe: refused, or its API server saying the engine died, is a run without a reading
    (probe_failure), judged with what the host saw like every other; a dead engine is down whatever it shows."""
    from check_vllm.contract.values import ENGINE_DEAD, ProbeOutcome
    from check_vllm.contract.values import REFUSED as PROBE_REFUSED
    from check_vllm.judge.idle_completion import probe_failure

    idle = assess(Memory(), reading(running=0.0), S, at(100.0))
    refused = probe_failure(ProbeOutcome(PROBE_REFUSED, 0.0, "connection refused"))
    assert refused == Failure(DOWN, "connection refused")
    alive = judge(idle.memory, 105.0, proc(1234, 0.0), refused)
    assert (alive.word, alive.code) == (STOPPING, WARNING)
    gap = judge(idle.memory, 105.0, Witness(), refused)
    assert (gap.word, gap.code, gap.action) == (STOPPING, WARNING, LOOK_AGAIN)
    dead = probe_failure(ProbeOutcome(ENGINE_DEAD, 0.0, "completion answered HTTP 500"))
    assert dead is not None and dead.dead_engine
    for witness in (proc(1234, 0.0), Witness(), None):
        v = judge(idle.memory, 101.0, witness, dead)
        assert (v.word, v.code, v.text) == (DOWN, CRITICAL, "engine died (completion answered HTTP 500)")
        assert v.memory.engine_dead == at(101.0)


def test_the_stop_survives_the_state_file():
    served = assess(Memory(), reading(), S, at(100.0))
    memory = judge(served.memory, 130.0, proc(1234, 0.0)).memory
    back = codec.from_json(codec.to_json(memory))
    assert back.stopping == memory.stopping and back.stopping is not None
    assert codec.from_json({"stopping": {"since": 1.0}}).stopping is None
    assert codec.from_json({"stopping": {"since": "x", "process": "a"}}).stopping is None


def test_a_process_started_after_the_last_reading_is_starting():
    served = assess(Memory(), reading(), S, at(100.0))
    v = judge(served.memory, 130.0, proc(2222, 120.0))  # an operator's restart at 120
    assert (v.word, v.code) == (STARTING, WARNING)


def test_a_reused_pid_is_another_process():
    first = judge(Memory(), 10.0, proc(1234, 0.0))
    again = judge(first.memory, 20.0, proc(1234, 15.0))  # same pid, another start: another process
    assert again.memory.starts.seen == 2


def test_the_same_process_seen_again_is_counted_once():
    v = Memory()
    for t in (10.0, 20.0, 30.0, 40.0):
        v = judge(v, t, proc(1234, 0.0)).memory
    assert v.starts.seen == 1


def test_a_crash_loop_is_down_naming_the_count_and_the_span():
    memory = Memory()
    verdicts = []
    for n, t in enumerate((10.0, 40.0, 70.0)):
        v = judge(memory, t + 5, proc(1000 + n, t))
        memory = v.memory
        verdicts.append((v.word, v.code))
    assert verdicts == [(STARTING, WARNING), (STARTING, WARNING), (DOWN, CRITICAL)]
    assert v.text.startswith("crash loop: 3 server processes started in 65 s, none has served (newest 1002")


def test_a_reading_ends_the_count_of_starts():
    memory = judge(judge(Memory(), 10.0, proc(1000, 5.0)).memory, 40.0, proc(1001, 35.0)).memory
    assert memory.starts.seen == 2
    served = assess(memory, reading(), S, at(60.0))
    assert served.memory.starts is None
    assert judge(served.memory, 100.0, proc(1002, 90.0)).memory.starts.seen == 1


def test_another_boot_is_another_process_and_its_age_is_its_own():
    before = judge(Memory(), 10.0, proc(1234, 0.0))
    # after a reboot the boot-time clock starts again: the same pid and ticks name another process
    rebooted = Instant(WALL0 + 5000.0, 30.0, "boot-b")
    process = ServerProcess(1234, 2000, Instant(WALL0 + 4990.0, 20.0, "boot-b"), "command line")
    v = assess_failure(before.memory, Evidence(REFUSED, Witness(process)), S, rebooted)
    assert (v.word, v.code, v.memory.starts.seen) == (STARTING, WARNING, 2)
    assert "started 10 s ago" in v.text


def test_a_wall_clock_step_neither_ends_nor_stretches_the_grace():
    # the wall clock jumps an hour ahead while the model loads: the age is measured on the boot-time clock
    v = judge(Memory(), 60.0, proc(1234, 0.0), now=at(60.0, wall_step=3600.0))
    assert (v.word, v.code) == (STARTING, WARNING)
    assert "started 60 s ago" in v.text
    # and back: a process that served before the step is still seen as having served
    served = assess(Memory(), reading(), S, at(100.0))
    back = judge(served.memory, 130.0, proc(1234, 0.0), now=at(130.0, wall_step=-3600.0))
    assert (back.word, back.code) == (STOPPING, WARNING)


def test_the_marker_counts_on_the_boot_time_clock_across_a_wall_clock_step():
    """Seen from another host (no witness), a restart the handler made 60 s ago on the boot-time clock is
    60 s old whatever the wall clock did since (before: a step an hour ahead read it as down)."""
    marker = at(0.0)
    ahead = assess_failure(Memory(), Evidence(REFUSED, None, marker), S, at(60.0, wall_step=3600.0))
    assert (ahead.word, ahead.code) == (STARTING, WARNING) and "restarted 60 s ago" in ahead.text
    late = assess_failure(Memory(), Evidence(REFUSED, None, marker), S, at(901.0, wall_step=-3600.0))
    assert (late.word, late.code) == (DOWN, CRITICAL)  # nor does a step back stretch the grace
    wall_only = assess_failure(Memory(), Evidence(REFUSED, None, WALL0), S, at(60.0, wall_step=3600.0))
    assert wall_only.word == DOWN  # a marker without the boot-time clock (an older handler): the wall's


def test_a_witness_that_cannot_say_falls_back_to_the_marker_and_says_why():
    unknown = Witness(error="pid file /run/vllm.pid: Permission denied")
    v = assess_failure(Memory(), Evidence(REFUSED, unknown, WALL0), S, at(30.0))
    assert (v.word, v.code) == (STARTING, WARNING)
    plain = judge(Memory(), 30.0, unknown)
    assert (plain.word, plain.code) == (DOWN, CRITICAL)
    assert "server process unknown: pid file /run/vllm.pid: Permission denied" in plain.text


def test_the_starts_survive_the_state_file():
    memory = judge(judge(Memory(), 10.0, proc(1000, 5.0)).memory, 40.0, proc(1001, 35.0)).memory
    back = codec.from_json(codec.to_json(memory))
    assert back.starts == memory.starts
    assert codec.from_json({"starts": {"since": "x", "count": 2, "last": "a"}}).starts is None
    assert codec.from_json({"starts": {"since": 1.0, "count": 2}}).starts is None


# --------------------------------------------------------------------------- --max-age and the proof


def test_an_old_baseline_of_the_same_process_still_proves_a_stall():
    short = S._replace(max_age=5.0, stuck_seconds=4.0, min_gap=1.0)
    memory, words = Memory(), []
    for t in (0.0, 6.0, 12.0, 18.0):
        v = assess(memory, reading(steps=100.0), short, at(t))
        memory = v.memory
        words.append((v.word, v.code))
    assert words == [("busy", OK), ("stalling", WARNING), ("stuck", CRITICAL), ("stuck", CRITICAL)]
    assert v.tokens_per_second is None  # a rate over more than --max-age is no news


def test_an_old_baseline_of_another_process_or_without_a_boot_clock_is_no_baseline():
    short = S._replace(max_age=5.0, stuck_seconds=4.0, min_gap=1.0)
    first = assess(Memory(), reading(), short, at(0.0))
    other = assess(first.memory, reading(start=WALL0 - 10), short, at(6.0))
    assert other.word == "restarted"
    wall_only = assess(Memory(), reading(), short, WALL0)
    later = assess(wall_only.memory, reading(), short, WALL0 + 6.0)
    assert (later.word, later.code) == ("busy", OK)  # no boot-time clock: age decides, as before


# --------------------------------------------------------------------------- the contract owns each word's state


@pytest.mark.parametrize("saved, word, code", [
    ({"word": "idle", "state": 2}, "idle", None),  # idle is never CRITICAL: no verdict
    ({"word": "busy", "state": 2}, "busy", OK),
    ({"word": "stuck", "state": 0}, "stuck", CRITICAL),
    ({"word": "unresponsive", "state": 2}, "unresponsive", CRITICAL),
    ({"word": "unresponsive", "state": 0}, "unresponsive", None),
    ({"word": "unresponsive", "state": True}, "unresponsive", None),
    ({"word": "no such word", "state": 2}, "no such word", None),
])
def test_a_state_file_cannot_change_the_state_of_a_word(saved, word, code):
    last = codec.remembered({**saved, "text": "", "at": WALL0})
    assert (last.word, last.code) == (word, code)


def test_a_repeat_of_a_saved_idle_is_ok_whatever_state_the_file_claims():
    first = assess(Memory(), reading(running=0.0), S, at(0.0))
    doc = codec.to_json(first.memory)
    doc["verdict"]["state"] = CRITICAL  # a hand-edited or foreign file
    again = assess(codec.from_json(doc), reading(running=0.0), S, at(1.0))  # within --min-gap: a repeat
    assert (again.word, again.code) == ("idle", OK)


@pytest.mark.parametrize("models", [MODELS_OK, MODELS_ANSWERED])
def test_metrics_off_on_a_server_whose_models_answer_is_never_starting_or_down(models):
    """llama.cpp's and SGLang's default: /metrics off (501, 404) while /v1/models answers. The server serves, so its
    process's age says nothing: `no metrics` WARNING, never `down` after the start grace (a restart every start)."""
    off = Failure(NO_METRICS, "/metrics answered HTTP 501 (llama.cpp serves it only with --metrics)", models=models)
    for t in (35.0, 901.0, 86_400.0):
        v = judge(Memory(), t, proc(1234, 0.0), off)
        assert (v.word, v.code) == (NO_METRICS, WARNING), (t, v.text)
        assert "--metrics" in v.text


def test_metrics_off_while_models_fail_too_is_still_the_witness_s_to_explain():
    """Loading (llama.cpp answers every route 503 then): the process's age still tells starting from down."""
    loading = Failure(NO_METRICS, "/metrics answered HTTP 404", models=UNRESPONSIVE)
    assert judge(Memory(), 35.0, proc(1234, 0.0), loading).word == STARTING


def test_a_young_process_whose_own_route_says_loaded_is_not_starting():
    """llama-server's /health answers 200 once its model is loaded (503 "Loading model" until then): one whose
    decode loop hangs before the check's first reading is judged on its silence, not `starting` for the 900 s of
    its grace, and its silence is proven as any other."""
    young = proc(1234, 0.0)
    silent = Failure(UNRESPONSIVE, "GET /metrics timed out after 10 s")
    first = assess_failure(Memory(), Evidence(silent, young, loaded=True), S, at(35.0))
    assert first.word == UNRESPONSIVE and first.code == WARNING, first.summary
    later = assess_failure(first.memory, Evidence(silent, young, loaded=True), S, at(35.0 + 130.0))
    assert (later.word, later.code) == (UNRESPONSIVE, CRITICAL), later.summary
    # the same process, loading (no 200): starting
    assert assess_failure(Memory(), Evidence(silent, young), S, at(35.0)).word == STARTING
