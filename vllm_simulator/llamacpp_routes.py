"""llama-server b11434's routes as the simulator serves them (tools/server/server.cpp, server-context.cpp).

/health answers from the HTTP thread whatever the decode loop does. /metrics (only with --metrics, else 501) is a
task the loop serves even from inside a decode (``yield_to_queue``), but not while the loop is stopped between
tasks; it carries ``Process-Start-Time-Unix`` and ignores any query; ``/metrics/`` is 404. /props and /v1/models
never need the model. GET /slots and the completions are tasks that need it: they wake a sleeping server and
restart its idle timer. The handler speaks HTTP; this module decides what to answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Final
from urllib.parse import SplitResult, parse_qs

from . import llamacpp_api as api
from . import openai_api
from .engine import EngineCounters, Outcome
from .exchange import Exchange
from .llamacpp_engine import LlamacppEngine
from .llamacpp_page import CONTENT_TYPE, render
from .llamacpp_server import POLL_SECONDS, LlamacppServer
from .process import SimulatedProcess
from .scenarios import EngineMode, MetricsAnswer, Scenario

JSON: Final = "application/json; charset=utf-8"
COMPLETIONS: Final = ("/completion", "/completions", "/v1/completions", "/chat/completions", "/v1/chat/completions")
#: Every route served, as (method, path); anything else is httplib's 404.
KNOWN: Final = frozenset({("GET", "/health"), ("GET", "/metrics"), ("GET", "/props"), ("GET", "/slots"),
                          ("GET", "/models"), ("GET", "/v1/models"), *(("POST", p) for p in COMPLETIONS)})
#: What the request log counts as inference: the completions (GET /slots is a task, but generates nothing).
INFERENCE: Final = frozenset(("POST", p) for p in COMPLETIONS)
#: The loop stopped between two tasks (not inside a decode): no task is taken, not even the metrics one.
STOPPED_IDLE: Final = frozenset({EngineMode.HUNG, EngineMode.DEFERRED_HUNG})


def is_inference(method: str, path: str) -> bool:
    return (method, path) in INFERENCE


#: The routes llama-server answers without its --api-key (server-http.cpp public_endpoints); the rest answer 401.
PUBLIC: Final = frozenset({"/health", "/v1/health", "/models", "/v1/models", "/api/tags"})
INVALID_KEY: Final = {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}


def _key_given(ex: Exchange, key: str) -> bool:
    """The request carries the key as llama-server takes it: `Authorization: Bearer KEY` or `X-Api-Key: KEY`."""
    return ex.headers.get("Authorization") == f"Bearer {key}" or ex.headers.get("X-Api-Key") == key


def dispatch(ex: Exchange, server: LlamacppServer, target: SplitResult, body: bytes, index: int = 0) -> None:
    """Answer one request as llama-server would; ``index``: the engine that is this server (a router's child)."""
    path = target.path
    key = server.options.api_key
    if key and path not in PUBLIC and not _key_given(ex, key):
        _json(ex, 401, INVALID_KEY)
    elif (ex.command, path) not in KNOWN:
        ex.close_connection = True
        ex._send(404, api.NOT_FOUND, JSON)
    elif path == "/health":
        _json(ex, 200, {"status": "ok"})
    elif path == "/metrics":
        _metrics(ex, server, index)
    elif path == "/props":
        sleeping = server.is_sleeping(*_state(ex._proc, index))
        _json(ex, 200, api.props(ex._sim.model, ex._sim.max_num_seqs, server.options, sleeping))
    elif path in ("/models", "/v1/models"):
        _json(ex, 200, api.models(ex._sim.model, server.options.n_ctx))
    elif path == "/slots":
        _slots(ex, server, target.query, index)
    else:
        _completion(ex, server, path, body, index)


def page(server: LlamacppServer, proc: SimulatedProcess, index: int = 0) -> tuple[bytes, int]:
    """The /metrics body as one read sees it now, and its process's ``Process-Start-Time-Unix``."""

    def use(engines: Sequence[EngineCounters], entry: Scenario, start: float) -> tuple[bytes, float]:
        engine = engines[index]
        if not isinstance(engine, LlamacppEngine):
            raise TypeError("the llamacpp flavour's process holds LlamacppEngine")
        running, waiting = proc.load(index)
        return render(engine, running, waiting), start

    body, start = proc.locked(use)
    return body, server.t_start_us(start)


def _json(ex: Exchange, status: int, payload: Any) -> None:
    ex._send(status, json.dumps(payload, separators=(",", ":")).encode(), JSON)


def _state(proc: SimulatedProcess, index: int) -> tuple[float, EngineMode, float]:
    """(process start time, the engine's mode, when the scenario began): what the sleep rules read."""
    return proc.start_time(), proc.entry().mode(index), proc.entered()


def _gone(ex: Exchange) -> Callable[[], bool]:
    return lambda: ex._proc.is_gone() or ex._client_gone()


def _hold(ex: Exchange, index: int) -> bool:
    """Wait while the loop is stopped between tasks (a task is never taken); False if the client or process left."""
    gone = _gone(ex)
    while ex._proc.entry().mode(index) in STOPPED_IDLE:
        if gone():
            return False
        time.sleep(POLL_SECONDS)
    return True


def _metrics(ex: Exchange, server: LlamacppServer, index: int) -> None:
    proc = ex._proc
    answer = proc.entry().metrics
    if not server.options.metrics or answer is MetricsAnswer.NOT_FOUND:  # started without --metrics
        ex._send(501, api.error(501, "not_supported_error", api.METRICS_OFF), JSON)
        return
    if answer not in (MetricsAnswer.PAGE, MetricsAnswer.SLOW):  # a proxy's answer, in front of any engine
        ex._metrics()
        return
    if answer is MetricsAnswer.SLOW and not proc.slow_wait(ex._sim.slow_seconds):
        ex._drop()
        return
    if not server.is_sleeping(*_state(proc, index)) and not _hold(ex, index):  # asleep: cached at sleep, no task
        ex._drop()
        return
    body, t_start = page(server, proc, index)
    ex._send(200, body, CONTENT_TYPE, headers={"Process-Start-Time-Unix": str(t_start)})


def _slots(ex: Exchange, server: LlamacppServer, query: str, index: int) -> None:
    """GET /slots: a task (wakes the server, restarts its idle timer), answered even from inside a decode."""
    proc = ex._proc
    if not server.wake(*_state(proc, index), _gone(ex)):
        ex._drop()
        return
    if not server.options.slots:  # --no-slots: refused once awake (create_response() waited for the wake)
        ex._send(501, api.error(501, "not_supported_error", api.SLOTS_OFF), JSON)
        return
    if not _hold(ex, index):
        ex._drop()
        return
    server.task(proc.start_time())
    total = ex._sim.max_num_seqs

    def use(engines: Sequence[EngineCounters], entry: Scenario, start: float) -> list[dict[str, Any]]:
        engine = engines[index]
        running = min(total, proc.load(index)[0])
        decoded = engine.busy_decoded if isinstance(engine, LlamacppEngine) else 0
        task = engine.task_id if isinstance(engine, LlamacppEngine) else 0
        return api.slots(total, server.options.n_ctx, running, decoded, max(0, task - running + 1))

    listed = proc.locked(use)
    if parse_qs(query).get("fail_on_no_slot") and all(slot["is_processing"] for slot in listed):
        ex._send(503, api.error(503, "unavailable_error", "no slot available"), JSON)
        return
    _json(ex, 200, listed)


def _completion(ex: Exchange, server: LlamacppServer, path: str, raw: bytes, index: int) -> None:
    """A completion task: wake the server if it sleeps, queue for a slot, answer once served."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:  # common_json_error: an invalid request
        ex._send(400, api.error(400, "invalid_request_error", f"Invalid JSON: {exc}"), JSON)
        return
    asked = body.get("model") if isinstance(body, dict) else None
    model = asked if isinstance(asked, str) else ex._sim.model  # one model loaded: any name is served by it
    request = openai_api.parse_completion(body, "chat" in path, model)
    if isinstance(request, openai_api.ApiError):
        ex._send(400, api.error(400, "invalid_request_error", request.message), JSON)
        return
    proc = ex._proc
    if not server.wake(*_state(proc, index), _gone(ex)):
        ex._drop()
        return
    server.task(proc.start_time())
    outcome = proc.complete(request.prompt_tokens, request.max_tokens, ex._client_gone, POLL_SECONDS, engine=index)
    if outcome is not Outcome.SERVED:
        ex._drop()
        return
    server.task(proc.start_time())
    _json(ex, 200, api.completion(request, ex._sim.model))
