"""A run without a /metrics reading judged: (memory, evidence, settings, now) -> Verdict. Pure.

The one judge of every run without a reading (the first read, a re-read, a refused probe, a probe's failed
re-read, the handler's own look), on one check_vllm.contract.values.Evidence. CRITICAL at once only when nothing
listens (connection refused, an engine its own API server calls dead). A server that did not answer (a time-out,
a 5xx; with --proxy, on /v1/models) earns a streak proven like every stuck (check_vllm.judge.proof). What the
monitoring side cannot reach (DNS, TLS) or could not send, or a peer that does not speak HTTP, is UNKNOWN: a
restart cannot mend it. An answer is never silence: /v1/models answering 4xx or looping redirects is WARNING at
most. The host's witness tells a loading or stopping server from a dead one; a first look a restart can fool
(nothing listening and no process, a reset before any answer) asks for a second one (LOOK_AGAIN) when the run
before saw the server up.
"""

from __future__ import annotations

from check_vllm.contract.defaults import Settings
from check_vllm.contract.engines import BY_NAME
from check_vllm.contract.instants import Instant, elapsed, instant, seconds_between
from check_vllm.contract.kept import NO_PROCESS, Memory, Starts, Stopping
from check_vllm.contract.values import MODELS_ANSWERED, MODELS_OK, Evidence, Failure, ServerProcess, Witness
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import (
    CRITICAL,
    DOWN,
    LOOK_AGAIN,
    NO_METRICS,
    OK,
    PAUSED,
    PROTOCOL,
    PROXY,
    STARTING,
    STOPPING,
    UNREACHABLE,
    UNRESPONSIVE,
    WARNING,
)
from check_vllm.judge import process_words, wording
from check_vllm.judge.finish import finish
from check_vllm.judge.proof import extend, lasted, proven
from check_vllm.judge.quiet import holds_itself

LIFECYCLE = (DOWN, UNRESPONSIVE, NO_METRICS)  # what a loading, stopping or restarting server can cause


def host_may_explain(failure: Failure) -> bool:
    """A failure a loading, stopping or restarting server can cause: the host's witness is asked. One whose /metrics
    is off (404, llama.cpp's 501: their default) while /v1/models answers serves: never loading nor down."""
    serving = failure.kind == NO_METRICS and failure.models in (MODELS_OK, MODELS_ANSWERED)
    return failure.kind in LIFECYCLE and not failure.dead_engine and not serving


#: The run before saw no server at all: a failure now is nothing new, and gets no second look.
_NOT_UP = (DOWN, PROTOCOL, UNREACHABLE)


def _silent(memory: Memory, word: str, detail: str, settings: Settings, now: Instant) -> Verdict:
    """No answer: WARNING that names how long, CRITICAL once proven."""
    streak = memory.unresponsive
    last_at = memory.last.at if memory.last else None
    if last_at is None or not 0.0 <= now.wall - last_at <= settings.max_age:
        streak = None  # a streak from before a long gap (a host reboot, a clock jump) is not this streak
    streak = extend(streak, now, now)
    code = CRITICAL if proven(streak, now, settings) else WARNING
    return finish(memory._replace(unresponsive=streak), word, wording.unresponsive(detail, streak, now),
                  None, now, stalled=lasted(streak, now), state=code)


def _since_marker(marker: Instant | None, memory: Memory, now: Instant, settings: Settings) -> float | None:
    """Seconds since check_vllm_restart restarted the server, within the start-up grace, and only until
    the check has seen the restarted server serve: one that dies again after that is down, not starting.
    What a check knows of a start when the host is no witness (a remote URL)."""
    if marker is None:
        return None
    served = memory.baseline is not None and seconds_between(marker, memory.baseline.at) > 0
    if served:
        return None
    since = seconds_between(marker, now)
    return since if 0.0 <= since <= settings.start_grace else None


def _served_since(memory: Memory, process: ServerProcess) -> bool:
    """The check has had a reading from the server since this process started: it served."""
    base = memory.baseline
    if base is None:
        return False
    after = elapsed(process.started, base.at)
    return after >= 0 if after is not None else base.at.wall > process.started.wall


def _young(memory: Memory, process: ServerProcess, settings: Settings, now: Instant) -> bool:
    """Inside its start grace and not served since it started."""
    age = elapsed(process.started, now)
    return not _served_since(memory, process) and age is not None and 0.0 <= age <= settings.start_grace


def _loading(memory: Memory, process: ServerProcess, detail: str, settings: Settings, now: Instant) -> Verdict:
    """A server process that has not served since it started: starting within the grace, else down; and
    a crash loop (several such processes in turn) is down whatever the age of the newest."""
    starts = memory.starts
    if starts is None:
        starts = Starts(1.0, process.started, process.identity)
    elif starts.last != process.identity:
        starts = Starts(starts.seen + 1, starts.since, process.identity)
    memory = memory._replace(starts=starts)
    age = max(elapsed(process.started, now) or 0.0, 0.0)
    if starts.seen >= settings.crash_starts:
        span = max(elapsed(starts.since, now) or 0.0, 0.0)
        return finish(memory, DOWN, process_words.crash_loop(starts.seen, span, process, detail), None, now)
    if age <= settings.start_grace:
        return finish(memory, STARTING, process_words.loading(process, age, settings.start_grace, detail), None, now)
    return finish(memory, DOWN, process_words.never_served(process, age, settings.start_grace, detail), None, now)


def _stopping(memory: Memory, saved: Stopping | None, process: ServerProcess, detail: str, settings: Settings,
              now: Instant) -> Verdict:
    """A process that served and still lives refuses connections: vLLM closes its listener first when it
    stops (an operator's restart, a deploy) and may take a while to drain and exit. Stopping within the
    grace, counted from the first refusal of this process; down after it (a listener dead under a live
    process is no stop, and a restart cures it)."""
    if saved is None or saved.process != process.identity:
        saved = Stopping(now, process.identity)
    memory = memory._replace(stopping=saved._replace(gone=None))
    span = max(elapsed(saved.since, now) or 0.0, 0.0)
    if span <= settings.stop_grace:
        return finish(memory, STOPPING, process_words.stopping(process, span, settings.stop_grace, detail),
                      None, now)
    return finish(memory, DOWN, process_words.stopped_too_long(process, span, settings.stop_grace, detail),
                  None, now)


def _stop_goes_on(memory: Memory, saved: Stopping, detail: str, settings: Settings, now: Instant) -> Verdict | None:
    """The stopping process has exited and no other has started yet: a restart (supervisorctl, a deploy)
    is between its stop and its start, so the stop goes on within the same grace from the first refusal, for
    the run that first finds it gone and within Settings.respawn_grace of that run. None when either is
    over: then nothing listening is down (an engine that died took its API server down with it)."""
    gone = saved.gone if saved.gone is not None else now
    saved = saved._replace(gone=gone)
    span, gap = elapsed(saved.since, now), elapsed(gone, now)
    if span is None or gap is None or not 0.0 <= span <= settings.stop_grace \
            or not 0.0 <= gap <= settings.respawn_grace:
        return None
    return finish(memory._replace(stopping=saved), STOPPING,
                  process_words.stopping_exited(saved.pid, span, settings.stop_grace, detail), None, now)


def _was_up(memory: Memory) -> bool:
    return memory.last is not None and memory.last.word not in _NOT_UP


def _first_look(memory: Memory, saved: Stopping | None, second_look: bool) -> bool:
    """This look can be fooled by a restart and a second one is due: the run before saw the server up, and
    neither this run (`second_look`) nor an earlier one (a stop in the memory: a NO_PROCESS first look, or a
    stop it saw and the grace it had) already looked."""
    return _was_up(memory) and not second_look and saved is None


def _host_explains(memory: Memory, saved: Stopping | None, evidence: Evidence, detail: str, settings: Settings,
                   now: Instant) -> Verdict | None:
    """What the host's witness and the restart marker make of a failure a lifecycle can cause: starting,
    stopping, a second look; None when they explain nothing (down, or the failure stands)."""
    failure, witness = evidence.failure, evidence.witness
    process = witness.process if witness is not None else None
    if process is not None and witness is not None and witness.tentative and not _young(memory, process, settings, now):
        process = None  # a guess proves a start only: past its grace, or served, the failure stands
    if process is not None:
        if not _served_since(memory, process) and not evidence.loaded:  # its own route says it has loaded
            return _loading(memory, process, detail, settings, now)
        if failure.kind == DOWN:
            return _stopping(memory, saved, process, detail, settings, now)
    seen_gone = failure.kind == DOWN and process is None and witness is not None and not witness.error
    if seen_gone and saved is not None and saved.process != NO_PROCESS:
        held = _stop_goes_on(memory, saved, detail, settings, now)
        if held is not None:
            return held
    if seen_gone and _first_look(memory, saved, evidence.second_look):
        doubt = Stopping(now, NO_PROCESS, now)
        return finish(memory._replace(stopping=doubt), STOPPING, process_words.gone_look_again(detail), None,
                      now, action=LOOK_AGAIN)
    marker = instant(evidence.marker) if evidence.marker is not None else None
    since = _since_marker(marker, memory, now, settings)  # no process seen: what the handler knows
    if since is not None:
        return finish(memory, STARTING, process_words.starting(since, detail), None, now)
    return None


def _not_the_server(memory: Memory, failure: Failure, second_look: bool, now: Instant) -> Verdict | None:
    """UNKNOWN: the monitoring side cannot reach it, or the peer does not speak HTTP. A reset before any
    answer right after the server served is looked at again: a listener closing under a queued connection."""
    if failure.kind == UNREACHABLE or failure.models == UNREACHABLE:
        return finish(memory, UNREACHABLE, process_words.unreachable(failure.detail), None, now)
    if failure.kind == PROTOCOL or failure.models == PROTOCOL:
        again = LOOK_AGAIN if _was_up(memory) and not second_look else None
        return finish(memory, PROTOCOL, process_words.not_http(failure.detail), None, now, action=again)
    return None


def _answered(memory: Memory, failure: Failure, word: str, streaking: bool, settings: Settings,
              now: Instant) -> Verdict:
    """No metrics (or --proxy): liveness from /v1/models alone. An answer is never silence."""
    detail = failure.detail if word != PROXY else f"/v1/models failed: {failure.detail}"
    if failure.models == MODELS_OK:
        said = wording.models(failure.model)
        return finish(memory, word, said if word == PROXY else f"{failure.detail}; {said}", None, now,
                      state=OK if word == PROXY else WARNING)._replace(loaded=True)
    if failure.models == MODELS_ANSWERED or (failure.models is None and word == NO_METRICS):
        return finish(memory, word, failure.detail, None, now, state=WARNING)  # an answer, or nothing asked: no proof
    if streaking:
        return _silent(memory, word, detail, settings, now)
    return finish(memory, word, detail, None, now, state=CRITICAL)  # nothing listens on /v1/models


def engine_died_last(memory: Memory) -> bool:
    """The last verdict was its API server saying the engine died (the handler's look judges it so again)."""
    return memory.engine_dead is not None and memory.last is not None and memory.engine_dead.wall == memory.last.at


def assess_failure(memory: Memory, evidence: Evidence, settings: Settings, now: Instant | float) -> Verdict:
    """Judge a run in which /metrics gave no reading (or proxy mode, which never reads it), on its evidence; the
    verdict names whose server it is where the evidence tells (the answer, else the host's process)."""
    verdict, process = _judge(memory, evidence, settings, instant(now)), (evidence.witness or Witness()).process
    row = BY_NAME.get(process.engine) if process is not None else None
    return verdict._replace(engine=evidence.failure.engine or (row.key if row is not None else None))


def _judge(memory: Memory, evidence: Evidence, settings: Settings, now: Instant) -> Verdict:
    failure = evidence.failure
    saved, memory = memory.stopping, memory._replace(stopping=None)
    streaking = failure.kind == UNRESPONSIVE or (failure.kind in (PROXY, NO_METRICS) and failure.models == UNRESPONSIVE)
    if not streaking:
        memory = memory._replace(unresponsive=None)
    unknown = _not_the_server(memory, failure, evidence.second_look, now)
    if unknown is not None:
        return unknown
    if failure.dead_engine:  # its API server says so: down whatever the host shows (no stop; a restart cures it)
        return finish(memory._replace(engine_dead=now), DOWN, process_words.engine_died(failure.detail), None, now)
    if failure.kind in (PROXY, PAUSED, STOPPING):  # a proxy's, or the server's own word that it holds itself
        return _answered(memory, failure, PROXY, streaking, settings, now) if failure.kind == PROXY else \
            holds_itself(memory, failure, settings, now)
    detail = failure.detail
    if evidence.witness is not None and evidence.witness.error:
        detail = f"{detail}; server process unknown: {evidence.witness.error}"
    if host_may_explain(failure):
        held = _host_explains(memory, saved, evidence, detail, settings, now)
        if held is not None:
            return held
    if failure.kind == DOWN:
        return finish(memory, DOWN, detail, None, now)
    if failure.kind == UNRESPONSIVE:
        return _silent(memory, UNRESPONSIVE, detail, settings, now)
    return _answered(memory, failure._replace(detail=detail), NO_METRICS, streaking, settings, now)
