"""What one run leaves the next: the memory the state file carries (check_vllm.memory.codec writes and reads it)
and its parts: the baseline reading, the streaks of no progress, the last verdict, the server's starts and stop.
Plain immutable values; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract.instants import Instant
from check_vllm.contract.values import Reading, ServerProcess

_EMPTY: Mapping[str, str] = MappingProxyType({})  # read-only: a shared default must not be mutable


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
