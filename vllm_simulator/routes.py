"""vLLM's routes as the simulator serves them: which exist and with which method, the fixed answers of a page
that is not served, and the small JSON routes that say what the server holds (a pause, a checkpoint, the
fault-tolerance status), each answered from the scenario entry in force. No HTTP here: the handler speaks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from .scenarios import MetricsAnswer, Scenario

METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
HTML_ERROR_PAGE: Final = (
    b"<html><body><h1>502 Bad Gateway</h1>\n"
    b"<p>The server returned an invalid or incomplete response.</p>\n"
    b"<hr><center>nginx</center></body></html>\n"
)
#: prometheus_client's app, mounted at /metrics/ beside vLLM's own /metrics route.
RESTRICTABLE: Final = "/metrics/"
KNOWN: Final[Mapping[str, str]] = MappingProxyType({
    "/metrics": "GET",
    RESTRICTABLE: "GET",
    "/health": "GET",
    "/is_paused": "GET",
    "/checkpoint/status": "GET",
    "/v1/fault_tolerance/status": "GET",
    "/fault_tolerance/status": "GET",
    "/v1/models": "GET",
    "/v1/completions": "POST",
    "/v1/chat/completions": "POST",
})


class Canned(NamedTuple):
    """A fixed answer; ``handler`` is its http_requests_total label ("none": a route the server lacks)."""

    status: int
    body: bytes
    content_type: str
    handler: str


#: What /metrics answers when the scenario says it does not serve the page.
CANNED_METRICS: Final[Mapping[MetricsAnswer, Canned]] = MappingProxyType({
    MetricsAnswer.NOT_FOUND: Canned(404, b'{"detail": "Not Found"}', "application/json", "none"),
    MetricsAnswer.HTML_200: Canned(200, HTML_ERROR_PAGE, "text/html", "/metrics"),
    MetricsAnswer.HTTP_500: Canned(500, b"Internal Server Error", "text/plain; charset=utf-8", "/metrics"),
    MetricsAnswer.HTTP_502: Canned(502, HTML_ERROR_PAGE, "text/html", "/metrics"),
})


#: The routes that say what the server holds, each 404 unless the scenario has it.
HELD: Final = frozenset({"/is_paused", "/checkpoint/status", "/v1/fault_tolerance/status", "/fault_tolerance/status"})
_NOT_FOUND: Final = (404, {"detail": "Not Found"}, "none")


def held(path: str, entry: Scenario, engines: int) -> tuple[int, Any, str]:
    """(status, JSON payload, http_requests_total handler label) of a HELD route."""
    if path == "/is_paused":  # vLLM's dev-mode route: 404 unless the scenario is a pause
        return (200, {"is_paused": True}, path) if entry.paused else _NOT_FOUND
    if path == "/checkpoint/status":
        return _checkpoint(entry, path)
    return _fault_status(entry, path, engines)


def _checkpoint(entry: Scenario, path: str) -> tuple[int, Any, str]:
    """vLLM 0.34's GET /checkpoint/status (vllm/entrypoints/serve/checkpoint/api_router.py checkpoint_status):
    200 prepared, 500 failed, 503 otherwise; 404 without --enable-sleep-mode (the scenario has no state)."""
    state = entry.checkpoint
    if state is None:
        return _NOT_FOUND
    body: dict[str, str] = {"state": state}
    if state == "failed":
        body["error"] = "CUDA error: out of memory"
    return {"prepared": 200, "failed": 500}.get(state, 503), body, path


def _fault_status(entry: Scenario, path: str, engines: int) -> tuple[int, Any, str]:
    """GET /v1/fault_tolerance/status (0.34; /fault_tolerance/status on 0.33), served only with
    --enable-fault-tolerance: vllm/v1/engine/core_client.py get_status, each engine's entry as
    EngineCoreSentinel._push_status writes it."""
    if entry.fault_route != path:
        return _NOT_FOUND
    faulted = {engine: (status, info) for engine, status, info in entry.faults}
    listed = []
    for engine in range(engines):
        status, info = faulted.get(engine, ("healthy", ""))
        listed.append({"id": engine, "status": status, **({"fault_info": info} if info else {})})
    return 200, {"schema_version": 1, "total_engines": len(listed), "engines": listed}, path
