"""SGLang 0.5.23's routes as the simulator serves them (sglang/srt/entrypoints/http_server.py).

``/health`` and ``/health_generate`` are the same handler: a real one-token generation that answers 200 once any
output reaches the tokenizer (looking every second) and 503 after 20 s without one; each counts as inference in the
request log, because on a real server each is one. ``/ready`` is 503 while paused or after a failed health check.
``/metrics`` is prometheus_client's app mounted on every path that starts with it. Every answer is counted by the
HTTP middleware (``sglang_server``). The handler speaks HTTP; this module decides what to answer.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Final
from urllib.parse import SplitResult, parse_qs

from . import openai_api
from .engine import Outcome
from .exchange import Exchange
from .sglang_server import SglangServer, health_answer

#: FastAPI's routes and their one method; a path starting with /metrics goes to the mounted metrics app.
KNOWN: Final = {
    "/health": "GET", "/health_generate": "GET", "/ready": "GET", "/ping": "GET", "/v1/models": "GET",
    "/v1/completions": "POST", "/v1/chat/completions": "POST",
    "/pause_generation": "POST", "/continue_generation": "POST",
}
#: What the request log counts as inference on an SGLang server: the completions and both health routes.
INFERENCE: Final = frozenset({("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
                              ("GET", "/health"), ("GET", "/health_generate")})
_PAUSE_MODES: Final = ("abort", "retract", "in_place")


def dispatch(handler: Exchange, server: SglangServer, target: SplitResult, body: bytes) -> None:
    """Answer one request, counted by the middleware as it arrives and when its response goes out."""
    path = target.path
    endpoint = "/metrics" if path.startswith("/metrics") else path
    start = handler._proc.start_time()
    server.arrived(start, endpoint, handler.command)
    handler.last_status = None
    try:
        _route(handler, server, path, target.query, body)
    finally:
        server.answered(start, endpoint, handler.command, handler.last_status)


def _route(handler: Exchange, server: SglangServer, path: str, query: str, body: bytes) -> None:
    if path.startswith("/metrics"):  # Mount("/metrics") with path_regex ^/metrics(?P<path>.*)$: any suffix
        if handler.command != "GET":
            handler._send_json(405, {"detail": "Method Not Allowed"})
        else:
            names = parse_qs(query).get("name[]")
            if names:  # restricted_registry over a MultiProcessCollector: no collector by name, an empty page
                handler._send(200, b"", "text/plain; version=0.0.4; charset=utf-8")
            else:
                handler._metrics(mounted=True, names=None)
        return
    expected = KNOWN.get(path)
    if expected is None:
        handler._send_json(404, {"detail": "Not Found"})
    elif expected != handler.command:
        handler._send_json(405, {"detail": "Method Not Allowed"})
    elif path in ("/health", "/health_generate"):
        _health(handler, server)
    elif path == "/ready":
        ready = server.ready(handler._proc.start_time())
        handler._send(200 if ready else 503, b"", "text/plain; charset=utf-8")
    elif path == "/ping":  # SageMaker's: is_healthy(), a paused server too
        handler._send(200 if server.healthy(handler._proc.start_time()) else 503, b"", "text/plain; charset=utf-8")
    elif path in ("/pause_generation", "/continue_generation"):
        _pause(handler, server, path == "/pause_generation", body)
    elif path == "/v1/models":
        handler._send_json(200, models_payload(handler._sim.model))
    else:
        _completion(handler, server, path, body)


def _health(handler: Exchange, server: SglangServer) -> None:
    """health_generate: look every second for output, 503 once the timeout passed without any."""
    options, proc = server.options, handler._proc
    started = time.monotonic()
    while True:
        if not _sleep(handler, options.health_poll_seconds):
            handler._drop()
            return
        if not server.is_paused() and proc.locked(lambda engines, entry, _: health_answer(engines, entry)):
            server.set_healthy(proc.start_time(), True)
            handler._send(200, b"", "text/plain; charset=utf-8")
            return
        if time.monotonic() - started >= options.health_check_timeout:
            server.set_healthy(proc.start_time(), False)  # server_status = UnHealthy: /ready 503 from now on
            handler._send(503, b"", "text/plain; charset=utf-8")
            return


def _sleep(handler: Exchange, seconds: float) -> bool:
    """Wait ``seconds`` in short slices; False if the process died or stopped, or the client left."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.05, left))
        if handler._proc.is_gone() or handler._client_gone():
            return False
    return True


def _pause(handler: Exchange, server: SglangServer, pause: bool, raw: bytes) -> None:
    """POST /pause_generation (PauseGenerationReqInput.mode, default abort) and /continue_generation."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        body = None
    mode = body.get("mode", "abort") if isinstance(body, dict) else None
    if pause and mode not in _PAUSE_MODES:
        handler._send_json(422, {"detail": [{"type": "literal_error", "loc": ["body", "mode"],
                                             "msg": "Input should be 'abort', 'retract' or 'in_place'"}]})
        return
    server.set_paused(handler._proc.start_time(), pause)
    word = "paused" if pause else "continued"
    handler._send_json(200, {"message": f"Generation {word} successfully.", "status": "ok"})


def _completion(handler: Exchange, server: SglangServer, path: str, raw: bytes) -> None:
    """An OpenAI completion: held while paused, then queued for a slot like any request."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        handler._send_json(400, {"object": "error", "message": "Invalid JSON", "type": "BadRequestError",
                                 "param": None, "code": 400})
        return
    request = openai_api.parse_completion(body, path == "/v1/chat/completions", handler._sim.model)
    if isinstance(request, openai_api.ApiError):
        handler._send_json(request.status, {"object": "error", "message": request.message, "type": request.kind,
                                            "param": None, "code": request.status})
        return
    proc = handler._proc
    if not server.wait_unpaused(lambda: proc.is_gone() or handler._client_gone(), 0.05):
        handler._drop()
        return
    outcome = proc.complete(request.prompt_tokens, request.max_tokens, handler._client_gone, 0.05)
    if outcome is Outcome.SERVED or outcome is Outcome.SLEEPING:
        handler._send_json(200, completion_payload(request, handler._sim.model))
    else:
        handler._drop()


def models_payload(model: str) -> dict[str, Any]:
    """GET /v1/models: ModelList of one ModelCard (created is the time of the request, as its default_factory)."""
    card = {"id": model, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": model,
            "parent": None, "max_model_len": openai_api.MAX_MODEL_LEN}
    return {"object": "list", "data": [card]}


def completion_payload(request: openai_api.Completion, model: str) -> dict[str, Any]:
    """A served completion in SGLang's shape: `` ok`` once per requested token, finished by length."""
    text = " ok" * request.max_tokens
    usage = {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens + request.max_tokens,
             "completion_tokens": request.max_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0}
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length", "matched_stop": None}
    if request.chat:
        choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
        head = {"id": uuid.uuid4().hex, "object": "chat.completion"}
    else:
        choice["text"] = text
        head = {"id": uuid.uuid4().hex, "object": "text_completion"}
    return {**head, "created": int(time.time()), "model": model, "choices": [choice], "usage": usage}
