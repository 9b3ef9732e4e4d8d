"""The values that flow through one observation: readings, failures, probe outcomes, memory, verdicts.

The bottom layer: I/O modules return these, the judge takes and returns them, the front ends print
them. Plain immutable values, no behaviour beyond a few derived numbers; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

#: The signals whose movement between two readings proves the engine did work.
PROGRESS_FIELDS = ("steps", "step_tokens", "generation_tokens", "prompt_tokens", "finished", "kv_cache")
#: Counters: they only grow within one process; going backwards means a new process.
COUNTER_FIELDS = ("steps", "step_tokens", "generation_tokens", "prompt_tokens", "finished", "preemptions")

_EMPTY: Mapping[str, str] = MappingProxyType({})  # read-only: a shared default must not be mutable


class EngineReading(NamedTuple):
    """What one engine (one `engine` label value; "" on versions without it) showed. A NamedTuple, as
    every value here: a frozen dataclass of this size costs a one-shot run ~3 ms just to define."""

    running: float = 0.0
    waiting: float = 0.0
    steps: float | None = None
    step_tokens: float | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    finished: float | None = None
    kv_cache: float | None = None  # fraction 0..1
    preemptions: float | None = None
    asleep: bool | None = None  # None: the version has no sleep gauge
    #: Waiting requests deferred on a KV transfer (vllm:num_requests_waiting_by_reason{reason="deferred"}),
    #: None where the version has no such gauge.
    deferred: float | None = None
    created: float | None = None  # newest `_created` of its counters: the owning process's birth

    @property
    def work(self) -> float:
        return self.running + self.waiting


class Reading(NamedTuple):
    """One scrape of /metrics."""

    engines: Mapping[str, EngineReading] = MappingProxyType({})
    process_start: float | None = None
    model: str | None = None
    #: Weight-update operations in flight (vllm:rl_weight_update_operations_in_flight, summed): an RL trainer
    #: moving weights in; None where the server has no such gauge.
    weight_updates: float | None = None

    @property
    def work(self) -> float:
        return sum(e.work for e in self.engines.values())


#: Failure.models when /v1/models listed a model.
MODELS_OK = "ok"
#: Failure.models when /v1/models answered without a model list (4xx, a redirect loop, no list): an
#: answer is proof that the server's HTTP side lives, never silence.
MODELS_ANSWERED = "answered"


class Failure(NamedTuple):
    """/metrics gave no reading (or is not to be read, in proxy mode). `kind` is the verdict word it leads to."""

    kind: str  # vocab.DOWN | UNREACHABLE | UNRESPONSIVE | NO_METRICS | PROXY | PROTOCOL
    detail: str
    #: How /v1/models fared when it was asked (no metrics, proxy): MODELS_OK, MODELS_ANSWERED, or DOWN /
    #: UNREACHABLE / UNRESPONSIVE / PROTOCOL as for /metrics; None when it was not asked.
    models: str | None = None
    model: str | None = None
    #: The server's API server said its engine died (an error naming it, or GET /health 503): down whatever
    #: the host shows of the API server's process, and a restart is what it needs.
    dead_engine: bool = False
    #: The HTTP status of a server that answered (a 5xx), None when nothing came back in time.
    status: int | None = None


# What GET /is_paused said (asked only on the stall path).
PAUSED_YES = "paused"
PAUSED_NO = "not paused"
NO_PAUSE_ROUTE = "no route"  # 404: not a dev-mode server (or before 0.32): remembered until the process changes
PAUSE_UNKNOWN = "unknown"  # an error or a time-out: says nothing, asked again next time

# What became of the 1-token probe: one kind, set where the answer is read.
ANSWERED = "answered"
REFUSED = "refused"  # connection refused: the server is down, not stuck
REJECTED = "rejected"  # 4xx, or no model to ask for: the server answers, the probe proves nothing
NO_ANSWER = "no answer"  # timed out, or 5xx: proof of a stall only if a re-read shows no progress
ENGINE_DEAD = "engine dead"  # the API server says its engine died: a restart is what it needs
CUT_SHORT = "cut short"  # no answer within what -t left, less than --probe-timeout: proves nothing
#: vLLM >= 0.33 turned the probe away as paused (HTTP 503 ServiceUnavailableError "Generation is paused"): a
#: pause with mode wait or abort, or a checkpoint; the engine's own word, never a stall.
ENGINE_PAUSED = "engine paused"


class ProbeOutcome(NamedTuple):
    kind: str
    seconds: float
    detail: str = ""
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    #: The HTTP status of an answer that was no completion (None: no answer, or a completion).
    status: int | None = None


class Checkpoint(NamedTuple):
    """What GET /checkpoint/status said (vLLM >= 0.34 with --enable-sleep-mode): vLLM's CheckpointState value
    (running, preparing, prepared, restoring, failed) and its error; or NO_PAUSE_ROUTE (404, remembered per
    process) or PAUSE_UNKNOWN (anything else)."""

    state: str
    error: str = ""


class EngineFault(NamedTuple):
    """One engine that GET /v1/fault_tolerance/status (--enable-fault-tolerance) calls not healthy: its id (the
    `engine` label of /metrics), vLLM's status word (diagnosing, unhealthy, dead) and its fault_info."""

    engine: str
    status: str
    info: str = ""


# --------------------------------------------------------------------------- time and memory: what one run leaves the next


class Instant(NamedTuple):
    """A moment on two clocks: the wall clock (for people and the handler) and the boot-time clock of one
    boot, which no clock step moves: elapsed time is measured on it whenever both ends have it."""

    wall: float
    mono: float | None = None
    boot: str | None = None


def elapsed(since: Instant, now: Instant) -> float | None:
    """Seconds from `since` to `now`, or None when no clock spans both (another boot)."""
    if since.mono is not None and now.mono is not None and since.boot and now.boot:
        return now.mono - since.mono if since.boot == now.boot else None
    return now.wall - since.wall


def instant(now: Instant | float) -> Instant:
    """A bare wall-clock time (a test table, an old caller) is an Instant without the boot-time clock."""
    return now if isinstance(now, Instant) else Instant(float(now))


def seconds_between(since: Instant, now: Instant) -> float:
    """As elapsed, but across a reboot on the wall clock, the only one that spans both: for the age of a
    restart (its marker, the cooldown), which a reboot does not end, unlike a stall's proof."""
    lapse = elapsed(since, now)
    return now.wall - since.wall if lapse is None else lapse


class Streak(NamedTuple):
    """A condition (no progress, no answer) that has held since `since` over `readings` readings."""

    since: Instant
    readings: float


class Baseline(NamedTuple):
    reading: Reading
    at: Instant


class Footprint(NamedTuple):
    """What the check's own answered probe added to the counters, to be discounted on the next comparison."""

    prompt_tokens: float
    completion_tokens: float
    at: float


class Remembered(NamedTuple):
    """The last verdict as the state file keeps it: the restart handler's evidence."""

    word: str
    code: int | None
    text: str
    at: float | None
    engines: Mapping[str, str] = _EMPTY
    #: An idle verdict that asked for a probe no run has made yet: a probing run must not repeat it as its own.
    unprobed: bool = False


class ServerProcess(NamedTuple):
    """The vLLM API server's process as this host sees it. PID, start (clock ticks since boot) and boot id
    together name one process: a reused PID has another start, a reboot another boot id."""

    pid: int
    start_ticks: int
    #: When it started, on both clocks (the boot-time one exact, the wall one derived from it).
    started: Instant
    #: How it was found: "command line", "pid file", "pid command".
    how: str

    @property
    def identity(self) -> str:
        return f"{self.started.boot or ''}:{self.pid}:{self.start_ticks}"

    @staticmethod
    def pid_in(identity: str) -> str:
        """The PID an identity names, read where its format is written ("?" when it is not one)."""
        parts = identity.split(":")
        return parts[1] if len(parts) == 3 else "?"


class Witness(NamedTuple):
    """What the host said of the server's process: the process, none (None), or why it cannot say."""

    process: ServerProcess | None = None
    error: str = ""


class Evidence(NamedTuple):
    """Everything known of a run without a reading, for the one judge of it (check_vllm.judge.silence): what
    failed, what the host saw of the server's process (None: no witness, a remote URL), check_vllm_restart's
    marker, and whether this is already the second look of a first look a restart can fool."""

    failure: Failure
    witness: Witness | None = None
    marker: Instant | None = None
    second_look: bool = False


class Starts(NamedTuple):
    """Distinct server processes seen starting, none of which has served since the first: a crash loop
    shows as a count that grows while every one of them stays young."""

    seen: float
    since: Instant
    #: ServerProcess.identity of the newest one seen.
    last: str


#: Stopping.process of a first look that found no process at all (no stop was seen, one is suspected).
NO_PROCESS = ""


class Stopping(NamedTuple):
    """A server process that served and now refuses connections: since when, and which process."""

    since: Instant
    #: ServerProcess.identity.
    process: str
    #: The first run that found it exited (None: not yet). The next process must appear within
    #: Settings.respawn_grace of that, or nothing listening is down.
    gone: Instant | None = None

    @property
    def pid(self) -> str:
        return ServerProcess.pid_in(self.process)


class Memory(NamedTuple):
    baseline: Baseline | None = None
    #: The baseline the current one replaced: a reading that continues it, not the current one, is a
    #: second server behind the same URL (a load balancer), not a restart.
    previous: Baseline | None = None
    #: Per engine: work present and no progress.
    stalls: Mapping[str, Streak] = MappingProxyType({})
    #: /metrics (or, with --proxy, /v1/models) did not answer.
    unresponsive: Streak | None = None
    #: The idle probe went unanswered and nothing moved.
    unanswered: Streak | None = None
    probe: Footprint | None = None
    last: Remembered | None = None
    #: Since when this server is read by its whole /metrics page: its restricted page (check_vllm.server.api)
    #: failed while the whole page worked. None: the restricted page is asked for.
    whole_page: Instant | None = None
    #: Server processes seen starting since the server last served (the host's witness).
    starts: Starts | None = None
    #: Since when the process that served refuses connections (the host's witness). A Stopping with no
    #: process (NO_PROCESS) is a first look that found nothing right after the server was up: the run that
    #: finds it again is the second look.
    stopping: Stopping | None = None
    #: When its API server last said the engine died: the verdict of that instant (last.at) is down whatever the
    #: host shows of the API server (the handler's own look reads it).
    engine_dead: Instant | None = None
    #: Since when the server has said it is paused on purpose (None: not paused).
    paused: Instant | None = None
    #: process_start_time_seconds of a server that answered GET /is_paused 404 (not in dev mode): not asked
    #: again until the process changes.
    no_pause_route: float | None = None
    #: The same for GET /checkpoint/status (no --enable-sleep-mode, or before 0.34).
    no_checkpoint_route: float | None = None
    #: The same for the fault-tolerance status (no --enable-fault-tolerance).
    no_fault_route: float | None = None


# --------------------------------------------------------------------------- the verdict


class Verdict(NamedTuple):
    word: str
    code: int  # the plugin exit code, vocab.OK .. CRITICAL
    text: str
    memory: Memory
    #: vocab.PROBE or vocab.REREAD: what would settle the question; None when it is settled.
    action: str | None = None
    engines: Mapping[str, str] = _EMPTY
    running: float | None = None
    waiting: float | None = None
    kv_cache: float | None = None  # percent, the fullest engine
    tokens_per_second: float | None = None
    prompt_tokens_per_second: float | None = None
    steps_per_second: float | None = None
    stalled_seconds: float | None = None
    probe_seconds: float | None = None

    @property
    def summary(self) -> str:
        """The status text: the word first, then what it rests on."""
        return f"{self.word}: {self.text}" if self.text else self.word
