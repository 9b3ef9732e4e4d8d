"""llama-server b11434 in router mode (tools/server/server-models.cpp): ``--models-dir`` and no ``-m``, one child
llama-server per model, started on demand, every request proxied to the child its model names.

A GET names its model by ``?model=``, a POST by its body's ``model``; a model not loaded is loaded first unless the
query says ``autoload=false`` (then 400 "model is not loaded"); no name is 400 "model name is missing from the
request" (so is /metrics without one). The router answers /health, /v1/models (every model with its
``status.value``: unloaded, loading, loaded, sleeping), /props without a model, /models/load and /models/unload
itself. The simulator's engine ``i`` is model ``i``: a scenario's modes say what each child does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import SplitResult, parse_qs

from . import llamacpp_api as api
from . import llamacpp_routes
from .exchange import Exchange
from .llamacpp_engine import LlamacppOptions
from .llamacpp_server import POLL_SECONDS, LlamacppServer
from .process import SimulatedProcess

KNOWN: Final = llamacpp_routes.KNOWN | {("POST", "/models/load"), ("POST", "/models/unload")}
UNNAMED: Final = "model name is missing from the request"


class Router:
    """The router's own state: which of its models are loaded, and each child's identity and sleep."""

    def __init__(self, options: LlamacppOptions) -> None:
        self.options = options
        self.models = options.models
        self.children = tuple(LlamacppServer(options, lag=0.1 * (i + 1)) for i in range(len(self.models)))
        self._cond = threading.Condition()
        self._start_time: float | None = None
        self._states: list[str] = []

    def _renew_locked(self, start_time: float) -> None:
        """A new router process: its models as its options load them (none of the ``unloaded`` ones)."""
        if self._start_time != start_time:
            self._start_time = start_time
            self._states = ["unloaded" if name in self.options.unloaded else "loaded" for name in self.models]
            self._cond.notify_all()

    def state(self, start_time: float, index: int) -> str:
        with self._cond:
            self._renew_locked(start_time)
            return self._states[index]

    def load(self, proc: SimulatedProcess, index: int, stop: Callable[[], bool]) -> bool:
        """``ensure_model_ready``: start the child if it is not running, wait until it serves (False: ``stop()``)."""
        start = proc.start_time()
        with self._cond:
            self._renew_locked(start)
            if self._states[index] == "unloaded":
                self._states[index] = "loading"
                timer = threading.Timer(self.options.reload_seconds, self._loaded, args=(proc, start, index))
                timer.daemon = True
                timer.start()
            while self._states[index] == "loading" and self._start_time == start:
                if stop():
                    return False
                self._cond.wait(POLL_SECONDS)
            return self._states[index] == "loaded"

    def _loaded(self, proc: SimulatedProcess, start: float, index: int) -> None:
        proc.renew_engine(index)  # a new child process: its counters and its start instant new
        self.children[index].reborn()
        with self._cond:
            if self._start_time == start and self._states[index] == "loading":
                self._states[index] = "loaded"
                self._cond.notify_all()

    def unload(self, start_time: float, index: int) -> None:
        with self._cond:
            self._renew_locked(start_time)
            self._states[index] = "unloaded"


def dispatch(ex: Exchange, router: Router, target: SplitResult, body: bytes) -> None:
    """Answer one request as the router would: itself, or proxied to the child its model names."""
    path, query = target.path, parse_qs(target.query)
    if (ex.command, path) not in KNOWN:
        ex.close_connection = True
        ex._send(404, api.NOT_FOUND, llamacpp_routes.JSON)
    elif path == "/health":
        _json(ex, 200, {"status": "ok"})
    elif path in ("/models", "/v1/models"):
        _json(ex, 200, {"data": [_listed(ex, router, i) for i in range(len(router.models))], "object": "list"})
    elif path == "/props" and not query.get("model"):
        _json(ex, 200, {"role": "router", "max_instances": 4, "models_autoload": True, "model_alias": "llama-server",
                        "model_path": "none", "default_generation_settings": {"params": {}, "n_ctx": 0},
                        "build_info": api.BUILD_INFO, "cors_proxy_enabled": False})
    elif path in ("/models/load", "/models/unload"):
        _manage(ex, router, path == "/models/load", body)
    else:
        named = query.get("model", [""])[0] if ex.command == "GET" else _body_model(body)
        _proxy(ex, router, named, query.get("autoload", ["true"])[0] in ("true", "1"), target, body)


def _json(ex: Exchange, status: int, payload: Any) -> None:
    ex._send(status, json.dumps(payload, separators=(",", ":")).encode(), llamacpp_routes.JSON)


def _invalid(ex: Exchange, message: str) -> None:
    ex._send(400, api.error(400, "invalid_request_error", message), llamacpp_routes.JSON)


def _body_model(body: bytes) -> str:
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return ""
    named = doc.get("model") if isinstance(doc, dict) else None
    return named if isinstance(named, str) else ""


def _status(ex: Exchange, router: Router, index: int) -> str:
    """``server_model_status_to_string``: a loaded child that sleeps says so."""
    proc = ex._proc
    state = router.state(proc.start_time(), index)
    if state == "loaded" and router.children[index].is_sleeping(proc.start_time(), proc.entry().mode(index),
                                                                proc.entered()):
        return "sleeping"
    return state


def _listed(ex: Exchange, router: Router, index: int) -> dict[str, Any]:
    name = router.models[index]
    return {"id": name, "aliases": [], "tags": [], "object": "model", "owned_by": "llamacpp",
            "created": int(time.time()), "status": {"value": _status(ex, router, index), "args": []},
            "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
            "source": "models_dir", "can_remove": False}


def _proxy(ex: Exchange, router: Router, named: str, autoload: bool, target: SplitResult, body: bytes) -> None:
    """``router_validate_model``, then the child's own answer (its headers too: Process-Start-Time-Unix)."""
    if not named:
        _invalid(ex, UNNAMED)
        return
    if named not in router.models:
        _invalid(ex, f"model '{named}' not found")
        return
    index, proc = router.models.index(named), ex._proc
    if not autoload and router.state(proc.start_time(), index) != "loaded":
        _invalid(ex, "model is not loaded")
        return
    if autoload and not router.load(proc, index, lambda: proc.is_gone() or ex._client_gone()):
        ex._drop()
        return
    llamacpp_routes.dispatch(ex, router.children[index], target, body, index)


def _manage(ex: Exchange, router: Router, load: bool, body: bytes) -> None:
    """POST /models/load and /models/unload with ``{"model": name}``."""
    named, proc = _body_model(body), ex._proc
    if named not in router.models:
        ex._send(404 if load else 400, api.error(404 if load else 400, "not_found_error" if load else
                                                 "invalid_request_error", "model is not found"), llamacpp_routes.JSON)
        return
    index = router.models.index(named)
    running = router.state(proc.start_time(), index) != "unloaded"
    if load == running:
        _invalid(ex, "model is already running" if load else "model is not running")
        return
    if load:
        threading.Thread(target=router.load, args=(proc, index, lambda: False), daemon=True).start()
    else:
        router.unload(proc.start_time(), index)
    _json(ex, 200, {"success": True})
