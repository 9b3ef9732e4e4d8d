"""The ``/_sim/`` control endpoints: steer a running simulator from another process (its request log, its scenario,
a restart). Never recorded in the request log, never counted in its metrics. The handler speaks the HTTP.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from .scenarios import BY_NAME, SCENARIOS, parse_switch

if TYPE_CHECKING:
    from .face import Face


def answer(sim: Face, method: str, path: str, raw: bytes, connection: socket.socket) -> tuple[int, Any, bool]:
    """(status, JSON payload, whether to close this connection after the answer)."""
    if path == "/_sim/requests" and method == "GET":
        return 200, [{"method": r.method, "path": r.path, "at": r.at} for r in sim.requests()], False
    if path == "/_sim/scenario" and method == "GET":
        return 200, {"scenario": sim.scenario}, False
    if path == "/_sim/scenario" and method == "POST":
        return _set_scenario(sim, raw, connection)
    if path == "/_sim/restart" and method == "POST":
        sim.restart()
        return 200, {"restarted": True, "process_start_time_seconds": sim.process_start_time}, False
    if path == "/_sim/clear" and method == "POST":
        sim.clear_requests()
        return 200, {"cleared": True}, False
    return 404, {"detail": "Not Found"}, False


def _set_scenario(sim: Face, raw: bytes, connection: socket.socket) -> tuple[int, Any, bool]:
    """``POST /_sim/scenario`` with ``{"scenario": name, "seconds": s, "then": name}`` (the last two optional)."""
    try:
        name, seconds, then = parse_switch(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return 400, {"error": str(exc), "scenarios": list(SCENARIOS)}, False
    # A scenario that does not listen closes the listener before we answer, so a client that reconnects right
    # after the answer is refused; this connection is spared and closed after the answer.
    close = not BY_NAME[name].listening
    try:
        sim.set_scenario(name, seconds=seconds, then=then, keep=connection)
    except ValueError as exc:
        return 400, {"error": str(exc), "scenarios": list(SCENARIOS)}, close
    return 200, {"scenario": name}, close
