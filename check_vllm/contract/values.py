"""The values that flow through one observation: readings, failures, probe outcomes, the host's witness, verdicts.

The bottom layer: I/O modules return these, the judge takes and returns them, the front ends print
them. Plain immutable values, no behaviour beyond a few derived numbers; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract.instants import Instant

#: The signals whose movement between two readings proves the engine did work.
PROGRESS_FIELDS = ("steps", "step_tokens", "generation_tokens", "prompt_tokens", "finished", "kv_cache", "slots")
#: Progress signals that are no counters: any change while work is present is progress (the KV cache's use; a mark
#: of the slots' tasks and tokens).
CHANGING_FIELDS = ("kv_cache", "slots")
#: Counters: they only grow within one process; going backwards means a new process.
COUNTER_FIELDS = ("steps", "step_tokens", "generation_tokens", "prompt_tokens", "finished", "preemptions")



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
    #: Who owns its counters: the newest `_created` of them (the owning process's birth), or the pid SGLang's
    #: per-process gauges carry; a change is a new process.
    created: float | None = None
    #: True where its work gauges are written only now and then (SGLang's): work shown with no progress is no
    #: proof of work. None: they are live.
    lagging_gauges: bool | None = None
    #: Which counters its page printed too coarsely to show a stall (dropped: progress cannot be told from them),
    #: as the words say it; None where every value is exact.
    coarse: str | None = None
    #: A mark of its slots' progress (llama.cpp's GET /slots: each slot's task and tokens, exact), read only when its
    #: page printed its counters too coarsely while work is present: it changes with every step.
    slots: float | None = None

    @property
    def work(self) -> float:
        return self.running + self.waiting

    @property
    def live_work(self) -> float:
        """The work its gauges prove: none where they lag (written only now and then)."""
        return 0.0 if self.lagging_gauges else self.work


class Reading(NamedTuple):
    """One scrape of /metrics."""

    engines: Mapping[str, EngineReading] = MappingProxyType({})
    process_start: float | None = None
    model: str | None = None
    #: Weight-update operations in flight (vllm:rl_weight_update_operations_in_flight, summed): an RL trainer
    #: moving weights in; None where the server has no such gauge.
    weight_updates: float | None = None
    #: Which engine's page it is: the key of its row (check_vllm.contract.engines).
    engine: str = "vllm"
    #: Weight-update operations finished (vllm:rl_weight_update_operations_total, summed over operations and
    #: outcomes): a live transfer finishes them, a dead trainer's leaves them standing; None without the counter.
    weight_ops: float | None = None

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
    #: The engine its answer names (llama.cpp's 501 names its --metrics): a key of BY_KEY; None when it names none.
    engine: str | None = None


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


class ServerProcess(NamedTuple):
    """The server's process (vLLM's API server, llama-server) as this host sees it. PID, start (clock ticks since boot) and boot id
    together name one process: a reused PID has another start, a reboot another boot id."""

    pid: int
    start_ticks: int
    #: When it started, on both clocks (the boot-time one exact, the wall one derived from it).
    started: Instant
    #: How it was found: "command line", "pid file", "pid command".
    how: str
    #: Whose server it runs, as the output names it (check_vllm.contract.engines: Engine.name).
    engine: str = "vLLM"

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
    #: The process is a guess, not a proof: the one engine server of this host behind a proxy that holds the URL's
    #: port, with no option naming it. Believed only of a start (young, not served yet), never for a `down`.
    tentative: bool = False


class Evidence(NamedTuple):
    """Everything known of a run without a reading, for the one judge of it (check_vllm.judge.no_reading): what
    failed, what the host saw of the server's process (None: no witness, a remote URL), check_vllm_restart's
    marker, and whether this is already the second look of a first look a restart can fool."""

    failure: Failure
    witness: Witness | None = None
    marker: Instant | None = None
    second_look: bool = False
    #: The server's own route says its model is loaded (Routes.loaded), asked of a young process that never
    #: served: it is not starting, whatever its age.
    loaded: bool = False
