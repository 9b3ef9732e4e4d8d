"""A run without a /metrics reading judged: (memory, failure, settings, now) -> Verdict. Pure.

What a restart can fix is CRITICAL at once only when nothing listens (connection refused, an engine
its own API server calls dead). A server that did not answer (a time-out, a 5xx, on /metrics or,
with --proxy, on /v1/models) earns a streak that must be proven like every stuck (check_vllm.judge.proof);
one that answered slowly within the run's budget gave a reading and never gets here. What the
monitoring side cannot reach (DNS, TLS) or could not send is UNKNOWN: restarting the server cannot
mend it; so is a peer that does not speak HTTP (an https port, a header past the client's limit). An
answer is never silence: /v1/models answering 4xx or looping redirects is WARNING at most. A first look a
restart can fool (refused with no process here, a reset before any answer) asks for a second one when the
run before saw the server up.
"""

from __future__ import annotations

from check_vllm.contract.values import (
    MODELS_ANSWERED,
    MODELS_OK,
    Failure,
    Instant,
    Memory,
    ServerProcess,
    Starts,
    Stopping,
    Verdict,
    Witness,
    seconds_between,
)
from check_vllm.contract.vocab import (
    CRITICAL,
    DOWN,
    NO_METRICS,
    OK,
    PROTOCOL,
    PROXY,
    REREAD,
    STARTING,
    STOPPING,
    UNKNOWN,
    UNREACHABLE,
    UNRESPONSIVE,
    WARNING,
    Settings,
)
from check_vllm.judge import wording
from check_vllm.judge.assess import finish
from check_vllm.judge.proof import elapsed, extend, instant, lasted, proven


def _silent(memory: Memory, word: str, detail: str, settings: Settings, now: Instant) -> Verdict:
    """No answer: WARNING that names how long, CRITICAL once proven."""
    streak = memory.unresponsive
    last_at = memory.last.at if memory.last else None
    if last_at is None or not 0.0 <= now.wall - last_at <= settings.max_age:
        streak = None  # a streak from before a long gap (a host reboot, a clock jump) is not this streak
    streak = extend(streak, now, now)
    code = CRITICAL if proven(streak, now, settings) else WARNING
    return finish(memory._replace(unresponsive=streak), word, code, wording.unresponsive(detail, streak, now),
                  None, now, stalled=lasted(streak, now))


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
        return finish(memory, DOWN, CRITICAL, wording.crash_loop(starts.seen, span, process, detail), None, now)
    if age <= settings.start_grace:
        return finish(memory, STARTING, WARNING, wording.loading(process, age, settings.start_grace, detail), None, now)
    return finish(memory, DOWN, CRITICAL, wording.never_served(process, age, settings.start_grace, detail), None, now)


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
        return finish(memory, STOPPING, WARNING, wording.stopping(process, span, settings.stop_grace, detail),
                      None, now)
    return finish(memory, DOWN, CRITICAL, wording.stopped_too_long(process, span, settings.stop_grace, detail),
                  None, now)


def _stop_goes_on(memory: Memory, saved: Stopping | None, detail: str, settings: Settings,
                  now: Instant) -> Verdict | None:
    """The stopping process has exited and no other has started yet: a restart (supervisorctl, a deploy)
    is between its stop and its start, so the stop goes on within the same grace from the first refusal, for
    the run that first finds it gone and within Settings.respawn_grace of that run. None when no stop was seen
    or either is over: then nothing listening is down (an engine that died took its API server down with it)."""
    if saved is None:
        return None
    gone = saved.gone if saved.gone is not None else now
    saved = saved._replace(gone=gone)
    span, gap = elapsed(saved.since, now), elapsed(gone, now)
    if span is None or gap is None or not 0.0 <= span <= settings.stop_grace \
            or not 0.0 <= gap <= settings.respawn_grace:
        return None
    return finish(memory._replace(stopping=saved), STOPPING, WARNING,
                  wording.stopping_exited(saved.pid, span, settings.stop_grace, detail), None, now)


#: The run before saw no server at all: a failure now is nothing new, and gets no second look.
_NOT_UP = (DOWN, PROTOCOL, UNREACHABLE)


def _look_again(memory: Memory, doubtful: bool, second_look: bool) -> str | None:
    """REREAD for a first look that a restart can fool, when the run before saw the server up: nothing
    listening and no process on this host (a restart's stop-to-start gap, supervisorctl or systemctl,
    lasts milliseconds), or a connection reset before any answer (a listener closing under a connection
    it had queued). The second look, a moment later, finds the next process starting, or the server
    answering; the same again, and it is what it says."""
    was_up = memory.last is not None and memory.last.word not in _NOT_UP
    return REREAD if doubtful and was_up and not second_look else None


def assess_failure(memory: Memory, failure: Failure, settings: Settings, now: Instant | float,
                   restart_marker: Instant | float | None = None, witness: Witness | None = None,
                   second_look: bool = False) -> Verdict:
    """Judge a run in which /metrics gave no reading (or proxy mode, which never reads it).

    `witness` is what this host saw of the server's process (None: the host is no witness, a remote URL):
    a process that has not served yet is starting, whoever started it; no process at all is down (after
    a second look, `second_look`, when the run before saw it up)."""
    now = instant(now)
    kind, detail = failure.kind, failure.detail
    stopping, memory = memory.stopping, memory._replace(stopping=None)
    streaking = kind == UNRESPONSIVE or (kind in (PROXY, NO_METRICS) and failure.models == UNRESPONSIVE)
    if not streaking:
        memory = memory._replace(unresponsive=None)
    if kind == UNREACHABLE or failure.models == UNREACHABLE:
        return finish(memory, UNREACHABLE, UNKNOWN, wording.unreachable(detail), None, now)
    if kind == PROTOCOL or failure.models == PROTOCOL:
        return finish(memory, PROTOCOL, UNKNOWN, wording.not_http(detail), None, now,
                      action=_look_again(memory, True, second_look))
    if kind == PROXY:
        if failure.models == MODELS_OK:
            return finish(memory, PROXY, OK, wording.models(failure.model), None, now)
        if failure.models == MODELS_ANSWERED:
            return finish(memory, PROXY, WARNING, detail, None, now)
        if streaking:
            return _silent(memory, PROXY, f"/v1/models failed: {detail}", settings, now)
        return finish(memory, PROXY, CRITICAL, f"/v1/models failed: {detail}", None, now)
    process = witness.process if witness is not None else None
    seen_gone = kind == DOWN and process is None and witness is not None and not witness.error  # the host: none
    if kind in (DOWN, UNRESPONSIVE, NO_METRICS):
        if process is not None and not _served_since(memory, process):
            return _loading(memory, process, detail, settings, now)
        if process is not None and kind == DOWN:
            return _stopping(memory, stopping, process, detail, settings, now)
        held = _stop_goes_on(memory, stopping, detail, settings, now) if seen_gone else None
        if held is not None:
            return held
        if witness is not None and witness.error:
            detail = f"{detail}; server process unknown: {witness.error}"
        marker = instant(restart_marker) if restart_marker is not None else None
        since = _since_marker(marker, memory, now, settings)  # no process seen: what the handler knows
        if since is not None:
            return finish(memory, STARTING, WARNING, wording.starting(since, detail), None, now)
    if kind == DOWN:
        return finish(memory, DOWN, CRITICAL, detail, None, now, action=_look_again(memory, seen_gone, second_look))
    if kind == UNRESPONSIVE:
        return _silent(memory, UNRESPONSIVE, detail, settings, now)
    # no metrics: liveness from /v1/models only
    if failure.models == MODELS_OK:
        return finish(memory, NO_METRICS, WARNING, f"{detail}; {wording.models(failure.model)}", None, now)
    if failure.models == MODELS_ANSWERED:
        return finish(memory, NO_METRICS, WARNING, detail, None, now)
    if streaking:
        return _silent(memory, NO_METRICS, detail, settings, now)
    if failure.models is None:  # /v1/models was not asked: no proof of anything
        return finish(memory, NO_METRICS, WARNING, detail, None, now)
    return finish(memory, NO_METRICS, CRITICAL, detail, None, now)  # nothing listens on /v1/models


