"""The vocabulary every part of check_vllm speaks: exit codes, verdict words, and the defaults.

One owner for each fact. The check, the restart handler, the Netdata collector and the demo import
these names; none of them restates a number or a word. Nothing here does I/O.
"""

from __future__ import annotations

from typing import NamedTuple

# --------------------------------------------------------------------------- exit codes (plugin API)

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
#: The plugin API's name for each exit code, in code order.
CODE_NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")

# --------------------------------------------------------------------------- verdict words

BUSY = "busy"
STALLING = "stalling"
STUCK = "stuck"
IDLE = "idle"
RESTARTED = "restarted"
SLEEPING = "sleeping"
DOWN = "down"
UNRESPONSIVE = "unresponsive"
NO_METRICS = "no metrics"
PROXY = "proxy"
STARTING = "starting"
#: The monitoring side cannot reach the server (DNS, TLS): a restart cannot fix it, so it is UNKNOWN.
UNREACHABLE = "unreachable"
#: The peer at the URL does not speak HTTP (an https port behind an http:// URL, a header past the client's
#: limit): an instant answer, not a busy event loop, so not restartable; UNKNOWN like unreachable.
PROTOCOL = "protocol"
#: /metrics comes from more than one server process in turn: the URL is a load balancer.
BALANCER = "balancer"

#: Every word a verdict can start with; Netdata charts one dimension per word.
WORDS = (BUSY, STALLING, STUCK, IDLE, RESTARTED, SLEEPING, DOWN, UNRESPONSIVE, NO_METRICS, PROXY, STARTING,
         UNREACHABLE, BALANCER, PROTOCOL)
#: Engine words, worst first: the worst engine names the whole server.
ENGINE_RANK = (STUCK, STALLING, BUSY, IDLE, SLEEPING)
#: Engine words that judge work present (a stall streak belongs to these).
WORKING = (BUSY, STALLING, STUCK)
#: Verdicts a restart can cure, when CRITICAL. "stalling" and "starting" are not proof.
RESTARTABLE = (STUCK, DOWN, UNRESPONSIVE)

# --------------------------------------------------------------------------- what a verdict asks the caller to do

#: Idle: a 1-token completion would prove the engine answers.
PROBE = "probe"
#: No proof either way yet: read /metrics again after a pause.
REREAD = "reread"

# --------------------------------------------------------------------------- defaults


class Settings(NamedTuple):
    """How the judge weighs evidence. The defaults here are the check's, the handler's and Netdata's."""

    stuck_readings: int = 2
    stuck_seconds: float = 120.0
    #: A comparison over less time than this proves nothing about a stall.
    min_gap: float = 2.0
    #: A previous reading older than this is no baseline (the server may have lived a life since).
    max_age: float = 3600.0
    #: After a restart marker, down/unresponsive/no metrics read as "starting" for this long.
    start_grace: float = 900.0


class Options(NamedTuple):
    """What one observation may do on the wire."""

    proxy: bool = False
    probe: bool = True
    model: str | None = None
    probe_timeout: float = 10.0
    #: Seconds for GET /metrics and /v1/models; None: whatever the run's deadline leaves (the check's -t).
    metrics_timeout: float | None = None
    #: With no usable previous reading and work present, read again this much later.
    reread_delay: float = 3.0
    #: False where the caller reads again soon anyway (the Netdata plugin's next tick).
    reread: bool = True


#: The check's whole-run budget (-t), seconds.
RUN_TIMEOUT = 30.0
#: Seconds to wait for another run (or handler call) holding the same target's lock.
LOCK_TIMEOUT = 10.0

SETTINGS = Settings()
OPTIONS = Options()
