"""The scenario table: every way the simulator can behave, one frozen entry per scenario.

The rest of the package never compares scenario names; it reads the fields of the entry in force. Adding a
scenario is adding a row here (and, if it needs a new kind of behaviour, a new ``EngineMode`` or
``MetricsAnswer`` member and the code that gives it meaning).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


class EngineMode(enum.Enum):
    """What one engine is doing; ``engine.py`` says how each mode moves the counters and the queue."""

    IDLE = "idle"  # no work; a request is served at once
    BUSY = "busy"  # every slot taken, requests queued, counters moving
    PREFILL = "prefill"  # one long prompt being read: only the KV cache grows
    STUCK = "stuck"  # frozen with work: slots taken, queue full, nothing moves
    HUNG = "hung"  # frozen with no work: metrics say idle, a completion never gets an answer
    SLEEPING = "sleeping"  # vLLM sleep mode: sleep gauge set, completions refused
    DEFERRED = "deferred"  # a decode instance whose queue all waits on a KV transfer: nothing runs, a probe is served
    #: Hung between two requests with its last gauges saying every waiting request deferred: nothing is served.
    DEFERRED_HUNG = "deferred_hung"


class MetricsAnswer(enum.Enum):
    """What ``GET /metrics`` answers (the other routes answer as usual while the port listens)."""

    PAGE = "page"  # the vLLM Prometheus page
    SLOW = "slow"  # the page, but only after ``slow_seconds``
    NOT_FOUND = "not_found"  # 404 JSON, as a server without a metrics route
    HTML_200 = "html_200"  # a proxy's HTML error page with status 200
    HTTP_500 = "http_500"  # 500 with a plain-text body
    HTTP_502 = "http_502"  # 502 with a proxy's HTML error page
    NOT_HTTP = "not_http"  # the connection reset at once, no HTTP: what a TLS port does to a plain http:// request


@dataclass(frozen=True)
class Scenario:
    """One row of the table.

    ``modes[i]`` is what engine ``i`` does; engines past the end of ``modes`` do what engine 0 does, so a
    scenario only spells out the engines that differ. ``restarts`` makes entering the scenario a process
    restart (counters to 0, new start time); coming back from a scenario that does not listen always is one.
    """

    name: str
    description: str
    modes: tuple[EngineMode, ...] = (EngineMode.IDLE,)
    metrics: MetricsAnswer = MetricsAnswer.PAGE
    listening: bool = True
    restarts: bool = False
    multiprocess: bool = False
    #: The engine died under a live API server (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1): GET /health answers 503
    #: (empty) and a completion 500 in vLLM 0.33's words, while /metrics still answers.
    engine_dead: bool = False
    #: Paused on purpose (POST /pause?mode=keep of an RL trainer, VLLM_SERVER_DEV_MODE=1): GET /is_paused says
    #: true; in every other scenario /is_paused is 404, as on a server without dev mode.
    paused: bool = False
    #: vLLM >= 0.33 paused with mode wait or abort (or for a checkpoint): every new request is answered HTTP 503
    #: ServiceUnavailableError "Generation is paused. ..." (vllm/v1/engine/core.py _reject_add_while_paused).
    turns_away: bool = False
    #: GET /checkpoint/status's CheckpointState (0.34 with --enable-sleep-mode); None: the route is not served.
    checkpoint: str | None = None
    #: --enable-fault-tolerance: the status route (0.34's /v1/fault_tolerance/status, 0.33's
    #: /fault_tolerance/status; None: not served) and the engines it reports as (id, status, fault_info).
    fault_route: str | None = None
    faults: tuple[tuple[int, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError(f"scenario {self.name!r} must give engine 0 a mode")

    @property
    def min_engines(self) -> int:
        """Engines the scenario needs; entering it adds engines up to this many (they are never removed)."""
        return len(self.modes)

    def mode(self, engine: int) -> EngineMode:
        """What engine number ``engine`` does in this scenario."""
        return self.modes[engine] if engine < len(self.modes) else self.modes[0]


_M = EngineMode
_A = MetricsAnswer

#: Every scenario, in the order the CLI lists them.
TABLE: Final[tuple[Scenario, ...]] = (
    Scenario("idle", "nothing to do: the only case where the check sends a 1-token probe"),
    Scenario("busy", "all slots full, requests queued, counters moving", (_M.BUSY,)),
    Scenario("long_prefill", "one long prompt being read: only the KV cache moves", (_M.PREFILL,)),
    Scenario("stuck", "engine frozen with work queued: OK -> WARNING -> CRITICAL", (_M.STUCK,)),
    Scenario("hung_idle", "engine frozen with no work: /metrics looks idle, only the probe can tell", (_M.HUNG,)),
    Scenario("restarted", "the server came back as a new process", restarts=True),
    Scenario("dp_one_frozen", "two data-parallel engines, engine 1 frozen", (_M.BUSY, _M.STUCK)),
    Scenario("multiprocess", "busy, metrics in prometheus multiprocess mode: no process_*, no _created",
             (_M.BUSY,), multiprocess=True),
    Scenario("no_metrics", "/metrics missing: liveness from /v1/models only", metrics=_A.NOT_FOUND),
    Scenario("html", "a proxy's HTML error page served with status 200", metrics=_A.HTML_200),
    Scenario("http_500", "/metrics answers 500", metrics=_A.HTTP_500),
    Scenario("http_502", "/metrics answers 502, a proxy's HTML error page", metrics=_A.HTTP_502),
    Scenario("not_http", "/metrics resets the connection, as a TLS port read with http://", metrics=_A.NOT_HTTP),
    Scenario("sleeping", "vLLM sleep mode", (_M.SLEEPING,)),
    Scenario("slow", "/metrics takes longer than the check may wait", metrics=_A.SLOW),
    Scenario("dead", "nothing listens on the port", listening=False),
    Scenario("paused", "an RL trainer paused the engine for a weight update: work frozen, /is_paused true",
             (_M.STUCK,), paused=True),
    Scenario("kv_deferred", "disaggregated decode: every waiting request deferred on a KV transfer, none runs",
             (_M.DEFERRED,)),
    Scenario("engine_dead", "the engine died, its API server lives on: /health 503, completions 500 (0.33)",
             (_M.HUNG,), engine_dead=True),
    Scenario("paused_reject", "vLLM >= 0.33 paused with mode wait or abort: every request 503 'Generation is paused', "
             "no dev mode", turns_away=True),
    Scenario("checkpoint_prepared", "vLLM 0.34 drained for a checkpoint: requests turned away, /checkpoint/status 200 "
             "prepared", turns_away=True, checkpoint="prepared"),
    Scenario("checkpoint_failed", "vLLM 0.34 whose checkpoint failed: requests turned away for good, /checkpoint/status "
             "500", turns_away=True, checkpoint="failed"),
    Scenario("fault_held", "fault tolerance: engine 1 of 2 faulted, held for recovery (status unhealthy), its "
             "gauges frozen", (_M.BUSY, _M.STUCK),
             fault_route="/v1/fault_tolerance/status", faults=((1, "unhealthy", "RuntimeError"),)),
    Scenario("deferred_hung", "hung, its last gauges saying every waiting request deferred: a probe is never "
             "answered", (_M.DEFERRED_HUNG,)),
)

#: The table by name.
BY_NAME: Final = MappingProxyType({entry.name: entry for entry in TABLE})

#: Every scenario name the simulator understands, in the order the CLI lists them.
SCENARIOS: Final[tuple[str, ...]] = tuple(entry.name for entry in TABLE)


def lookup(name: str) -> Scenario:
    """The entry for ``name``; ValueError (listing the known names) for anything else."""
    entry = BY_NAME.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return entry


def parse_switch(raw: bytes) -> tuple[str, float | None, str]:
    """(scenario, seconds, then) of a scenario switch; ValueError, KeyError or TypeError if it is not one."""
    body = json.loads(raw or b"{}")
    name = body["scenario"]
    seconds = body.get("seconds")
    then = body.get("then", "idle")
    if not isinstance(name, str) or not isinstance(then, str):
        raise TypeError("scenario must be a string")
    if seconds is not None:
        seconds = float(seconds)
    for candidate in (name, then):
        if candidate not in BY_NAME:
            raise ValueError(f"unknown scenario {candidate!r}")
    return name, seconds, then
