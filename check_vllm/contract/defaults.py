"""Every default, once: how the judge weighs evidence (Settings), what one observation may do on the wire
(Options), and the time-outs of a run, a lock and a connection. The front ends' options take their defaults
from here (check_vllm.cli.option_table); nothing restates a number. Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from check_vllm.contract.engines import AUTO


class Settings(NamedTuple):
    """How the judge weighs evidence. The defaults here are the check's, the handler's and Netdata's."""

    stuck_readings: int = 2
    stuck_seconds: float = 120.0
    #: A comparison over less time than this proves nothing about a stall.
    min_gap: float = 2.0
    #: A previous reading older than this is no baseline (the server may have lived a life since).
    max_age: float = 3600.0
    #: A server process younger than this that has not served yet (or, seen from another host, one that
    #: check_vllm_restart restarted this long ago) is "starting", not "down".
    start_grace: float = 900.0
    #: A server process that served and now refuses connections while it lives is "stopping" this long
    #: (vLLM closes its listener before it drains and exits), then "down": a live process whose listener
    #: died is not a stop.
    stop_grace: float = 120.0
    #: ...and once it has exited, the next process must appear within this many seconds of the first run that
    #: found it gone, or at the run after (a restart's stop-to-start gap is about a second): an engine that
    #: died and took its API server down with it, gracefully, is down, not a stop for the whole --stop-grace.
    respawn_grace: float = 10.0
    #: This many distinct server processes seen starting, none of which served: a crash loop ("down").
    crash_starts: int = 3
    #: A pause on purpose (an RL weight update, a checkpoint) longer than this is said plainly (WARNING); it is
    #: never restarted. Weight updates take seconds to minutes.
    pause_grace: float = 600.0
    #: vLLM's engine_recovery_timeout_sec (--enable-fault-tolerance): a faulted engine is held this long for an
    #: orchestrator's retry or scale_down before its error is raised; a stall within it is not proven stuck.
    recovery_window: float = 120.0


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
    #: Seconds before the second look at a server that refused with no process on this host although the run
    #: before saw it up: a restart's stop-to-start gap (supervisorctl, systemctl) is milliseconds.
    look_again: float = 1.0
    #: The server's process, where its command line cannot tell (a wrapper, a container): a pid file,
    #: or a command that prints the pid (`supervisorctl pid vllm`). Neither: found by its command line.
    pid_file: str | None = None
    pid_command: str | None = None
    #: The port vLLM itself listens on when the URL's port is a proxy's on this host (nginx for TLS or auth).
    server_port: int | None = None
    #: The user vLLM runs as: only this user's processes (and their --config files) are the host's witness.
    server_user: str | None = None
    #: Whose page /metrics is: a key of check_vllm.contract.engines.BY_KEY, or "auto" (the page says).
    engine: str = AUTO


#: The check's whole-run budget (-t), seconds.
RUN_TIMEOUT = 30.0
#: Seconds to wait for another run (or handler call) holding the same target's lock.
LOCK_TIMEOUT = 10.0
#: Seconds a TCP connection (and TLS handshake) may take; the Netdata collector, which reads every tick
#: and has no -t, gives a whole request as long.
CONNECT_TIMEOUT = 5.0

SETTINGS = Settings()
OPTIONS = Options()
