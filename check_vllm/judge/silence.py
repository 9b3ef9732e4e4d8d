"""A run without a /metrics reading judged: (memory, failure, settings, now) -> Verdict. Pure.

What a restart can fix is CRITICAL at once only when nothing listens (connection refused, an engine
its own API server calls dead). A server that did not answer (a time-out, a 5xx, on /metrics or,
with --proxy, on /v1/models) earns a streak that must be proven like every stuck (check_vllm.judge.proof);
one that answered slowly within the run's budget gave a reading and never gets here. What the
monitoring side cannot reach (DNS, TLS) or could not send is UNKNOWN: restarting the server cannot
mend it; so is a peer that does not speak HTTP (an https port, a header past the client's limit). An
answer is never silence: /v1/models answering 4xx or looping redirects is WARNING at most.
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
    Verdict,
    Witness,
)
from check_vllm.contract.vocab import (
    CRITICAL,
    DOWN,
    NO_METRICS,
    OK,
    PROTOCOL,
    PROXY,
    STARTING,
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


def _since_marker(marker: float | None, memory: Memory, now: Instant, settings: Settings) -> float | None:
    """Seconds since check_vllm_restart restarted the server, within the start-up grace, and only until
    the check has seen the restarted server serve: one that dies again after that is down, not starting.
    What a check knows of a start when the host is no witness (a remote URL)."""
    if marker is None:
        return None
    served = memory.baseline is not None and memory.baseline.at.wall > marker
    if served:
        return None
    since = now.wall - marker
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


def assess_failure(memory: Memory, failure: Failure, settings: Settings, now: Instant | float,
                   restart_marker: float | None = None, witness: Witness | None = None) -> Verdict:
    """Judge a run in which /metrics gave no reading (or proxy mode, which never reads it).

    `witness` is what this host saw of the server's process (None: the host is no witness, a remote URL):
    a process that has not served yet is starting, whoever started it; no process at all is down."""
    now = instant(now)
    kind, detail = failure.kind, failure.detail
    streaking = kind == UNRESPONSIVE or (kind in (PROXY, NO_METRICS) and failure.models == UNRESPONSIVE)
    if not streaking:
        memory = memory._replace(unresponsive=None)
    if kind == UNREACHABLE or failure.models == UNREACHABLE:
        return finish(memory, UNREACHABLE, UNKNOWN, wording.unreachable(detail), None, now)
    if kind == PROTOCOL or failure.models == PROTOCOL:
        return finish(memory, PROTOCOL, UNKNOWN, wording.not_http(detail), None, now)
    if kind == PROXY:
        if failure.models == MODELS_OK:
            return finish(memory, PROXY, OK, wording.models(failure.model), None, now)
        if failure.models == MODELS_ANSWERED:
            return finish(memory, PROXY, WARNING, detail, None, now)
        if streaking:
            return _silent(memory, PROXY, f"/v1/models failed: {detail}", settings, now)
        return finish(memory, PROXY, CRITICAL, f"/v1/models failed: {detail}", None, now)
    if kind in (DOWN, UNRESPONSIVE, NO_METRICS):
        process = witness.process if witness is not None else None
        if process is not None and not _served_since(memory, process):
            return _loading(memory, process, detail, settings, now)
        if witness is not None and witness.error:
            detail = f"{detail}; server process unknown: {witness.error}"
        since = _since_marker(restart_marker, memory, now, settings)  # no process seen: what the handler knows
        if since is not None:
            return finish(memory, STARTING, WARNING, wording.starting(since, detail), None, now)
    if kind == DOWN:
        return finish(memory, DOWN, CRITICAL, detail, None, now)
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


