"""What a server says of an engine it holds on purpose: paused (vLLM's /is_paused, SGLang's /ready), asleep
(llama.cpp's /props), GET /checkpoint/status and its fault-tolerance status.

Asked only where the judge says an answer may tell (check_vllm.judge.quiet): a checkpoint after a request was
turned away as paused, the fault status on a stall. Each returns a value of check_vllm.contract.values and never
raises; a 404 is NO_PAUSE_ROUTE (the judge remembers it per process), anything unreadable PAUSE_UNKNOWN.
"""

from __future__ import annotations

import httpx

from check_vllm.contract.engines import Routes
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import (
    NO_PAUSE_ROUTE,
    PAUSE_UNKNOWN,
    PAUSED_NO,
    PAUSED_YES,
    Checkpoint,
    EngineFault,
)
from check_vllm.server.api import HEALTH_TIMEOUT  # vLLM answers both from state its API server holds
from check_vllm.server.fetch import Endpoint, request
from check_vllm.server.fetch_errors import FetchError

#: vLLM's CheckpointState values (vllm/v1/engine/__init__.py, 0.34).
CHECKPOINT_STATES = ("running", "preparing", "prepared", "restoring", "failed")
#: vLLM's EngineStatusType names, lower case, other than healthy (vllm/v1/engine/__init__.py).
NOT_HEALTHY = ("diagnosing", "unhealthy", "dead")


def checkpoint(client: httpx.Client, endpoint: Endpoint, route: str, timeout: float) -> Checkpoint:
    """GET /checkpoint/status (vLLM >= 0.34, with --enable-sleep-mode; vllm/entrypoints/serve/checkpoint/
    api_router.py checkpoint_status): 200 prepared, 500 failed, 503 otherwise, each with {"state", "error"}."""
    try:
        resp = request(client, endpoint, "GET", route, min(timeout, HEALTH_TIMEOUT))
    except FetchError:
        return Checkpoint(PAUSE_UNKNOWN)
    if resp.status == 404:
        return Checkpoint(NO_PAUSE_ROUTE)
    doc = resp.json()
    state = doc.get("state") if isinstance(doc, dict) else None
    if resp.status not in (200, 500, 503) or state not in CHECKPOINT_STATES:
        return Checkpoint(PAUSE_UNKNOWN)
    error = doc.get("error")
    return Checkpoint(state, clean(endpoint.redact(error), 160) if isinstance(error, str) else "")


def faults(client: httpx.Client, endpoint: Endpoint, routes: tuple[str, ...], timeout: float
           ) -> tuple[EngineFault, ...] | str:
    """The engines the fault-tolerance status calls not healthy ({"engines": [{"id", "status", "fault_info"}]},
    vllm/v1/engine/core_client.py get_status); NO_PAUSE_ROUTE when none of `routes` is served."""
    for path in routes:
        try:
            resp = request(client, endpoint, "GET", path, min(timeout, HEALTH_TIMEOUT))
        except FetchError:
            return PAUSE_UNKNOWN
        if resp.status == 404:
            continue
        doc = resp.json()
        engines = doc.get("engines") if isinstance(doc, dict) and resp.status == 200 else None
        if not isinstance(engines, list):
            return PAUSE_UNKNOWN
        return tuple(EngineFault(clean(str(e.get("id")), 20), e["status"], clean(str(e.get("fault_info") or ""), 80))
                     for e in engines if isinstance(e, dict) and e.get("status") in NOT_HEALTHY)
    return NO_PAUSE_ROUTE


def is_paused(client: httpx.Client, endpoint: Endpoint, routes: Routes, timeout: float) -> str:
    """What the engine's paused route says: PAUSED_YES or PAUSED_NO; NO_PAUSE_ROUTE for a 404 (vLLM not in dev
    mode, or older); PAUSE_UNKNOWN for anything else. vLLM's GET /is_paused (>= 0.32 with VLLM_SERVER_DEV_MODE=1)
    answers a JSON `is_paused`; SGLang's GET /ready answers by its status (routes.paused_by_status: 503 while
    paused, and after a failed health check too), so its 503 says paused only while `routes.healthy` (/ping, 200
    while healthy, paused or not) answers 200: an unhealthy server is not paused."""
    timeout = min(timeout, HEALTH_TIMEOUT)
    try:
        resp = request(client, endpoint, "GET", routes.paused, timeout)
    except FetchError:
        return PAUSE_UNKNOWN
    if resp.status == 404:
        return NO_PAUSE_ROUTE
    if routes.paused_by_status:
        if resp.status == 200:
            return PAUSED_NO
        return PAUSED_YES if resp.status == 503 and _healthy(client, endpoint, routes.healthy, timeout) \
            else PAUSE_UNKNOWN
    doc = resp.json() if resp.status == 200 else None
    said = doc.get("is_paused") if isinstance(doc, dict) else None
    return PAUSE_UNKNOWN if not isinstance(said, bool) else PAUSED_YES if said else PAUSED_NO


def _healthy(client: httpx.Client, endpoint: Endpoint, route: str, timeout: float) -> bool:
    """`route` answers 200 (SGLang's /ping: a flag, no generation); False for anything else, or no route."""
    if not route:
        return False
    try:
        return request(client, endpoint, "GET", route, timeout).status == 200
    except FetchError:
        return False


def asleep(client: httpx.Client, endpoint: Endpoint, route: str, timeout: float) -> bool | None:
    """What GET `route` (llama.cpp's /props, answered from a cache while asleep: no task, so it wakes nothing
    and resets no idle timer) says of `is_sleeping`; None when it says nothing."""
    try:
        resp = request(client, endpoint, "GET", route, min(timeout, HEALTH_TIMEOUT))
    except FetchError:
        return None
    doc = resp.json() if resp.status == 200 else None
    said = doc.get("is_sleeping") if isinstance(doc, dict) else None
    return said if isinstance(said, bool) else None
