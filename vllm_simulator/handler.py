"""The HTTP handler: routes like vLLM's OpenAI server, plus the ``/_sim/`` control endpoints.

What to answer is decided by the simulated process and by the scenario entry in force (``metrics`` says what
``/metrics`` answers, ``listening`` whether anything is answered at all); this module only speaks HTTP.

Like vLLM, two routes serve the page: ``/metrics`` (vLLM's own route: the whole page, any query ignored, never
compressed) and ``/metrics/`` (prometheus_client's app, which vLLM mounts beside it: ``?name[]=`` restricts the
page to those samples, and it is gzipped when the client accepts gzip). The scenario's answer holds for both.
"""

from __future__ import annotations

import gzip
import json
import select
import socket
import struct
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import parse_qs, urlsplit

from . import control, openai_api, page, routes
from .engine import Outcome
from .exchange import read_body
from .scenarios import MetricsAnswer

if TYPE_CHECKING:
    from .face import Face, Host
    from .process import SimulatedProcess

#: How often waiting code looks again: the serve loop's poll, a queued request's check for a hung-up client.
WAIT_SLICE_SECONDS: Final = 0.05
_MAX_BODY_BYTES: Final = 1 << 20


_NO_HEADERS: Final[Mapping[str, str]] = MappingProxyType({})


class Handler(BaseHTTPRequestHandler):
    """HTTP front end: routes like vLLM's OpenAI server plus the ``/_sim/`` control endpoints."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    last_status: int | None = None  # of the last response sent on this connection

    @property
    def _server(self) -> Host:
        return cast("Host", self.server)

    @property
    def _sim(self) -> Face:
        return self._server.simulator

    @property
    def _proc(self) -> SimulatedProcess:
        return self._server.process

    def setup(self) -> None:
        super().setup()
        self._server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except (ConnectionError, TimeoutError, OSError):
            pass
        finally:
            self._server.untrack(self.connection)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def version_string(self) -> str:
        """The ``Server`` header: the flavour's server (uvicorn for vLLM and SGLang, llama.cpp)."""
        return self._sim.parts.server_header

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request stderr log; tests read the request log instead."""

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # --- plumbing ----------------------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str, *, handler: str | None = None,
              headers: Mapping[str, str] = _NO_HEADERS) -> None:
        """Write a complete response; ``handler`` labels it in http_requests_total (None: not counted)."""
        if handler is not None:
            self._proc.count_http(handler, self.command, status)
        self.last_status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, payload: Any, *, handler: str | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", handler=handler)

    def _api_error(self, error: openai_api.ApiError, handler: str) -> None:
        self._send_json(error.status, openai_api.error_payload(error, self._sim.legacy), handler=handler)

    def _client_gone(self) -> bool:
        """True when the peer closed its end (readable with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _drop(self) -> None:
        """Answer nothing and close, like a process that died with the request in flight."""
        self.close_connection = True

    # --- routing -----------------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        target = urlsplit(self.path)
        path = target.path
        try:
            body = read_body(self.headers, self.rfile, _MAX_BODY_BYTES)
        except ValueError:
            self.close_connection = True
            self._send_json(413, {"detail": "Request Entity Too Large"})
            return
        if path.startswith("/_sim/"):
            self._control(path, body)
            return
        sim = self._sim
        self._proc.record(self.command, path)
        if self._proc.is_gone():
            self._drop()
            return
        own = sim.parts.routes
        if own is not None:  # another engine's flavour answers its own routes (flavours.py)
            own(self, target, body)
            return
        expected = routes.KNOWN.get(path)
        if expected is None:
            self._send_json(404, {"detail": "Not Found"}, handler="none")
        elif expected != self.command:
            self._send_json(405, {"detail": "Method Not Allowed"}, handler=path)
        elif path == "/metrics":
            self._metrics()
        elif path == routes.RESTRICTABLE:
            self._metrics(mounted=True, names=parse_qs(target.query).get("name[]"))
        elif path == "/health":  # vLLM's answer: 200 or, for a dead engine, 503, both with an empty body
            self._send(503 if self._proc.entry().engine_dead else 200, b"", "application/json", handler=path)
        elif path in routes.HELD:
            status, payload, handler = routes.held(path, self._proc.entry(), sim.engines)
            self._send_json(status, payload, handler=handler)
        elif path == "/v1/models":
            self._send_json(200, openai_api.models_payload(sim.model, sim.process_start_time), handler=path)
        else:
            self._completion(path, body)

    def _metrics(self, *, mounted: bool = False, names: list[str] | None = None) -> None:
        """The page; ``mounted``: as prometheus_client's app serves it, only the samples in ``names`` if given."""
        sim = self._sim
        answer = self._proc.entry().metrics
        canned = routes.CANNED_METRICS.get(answer)
        if canned is not None:
            self._send(canned.status, canned.body, canned.content_type, handler=canned.handler)
            return
        if answer is MetricsAnswer.NOT_HTTP:  # as a TLS port does to a plain request: reset, no HTTP at all
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # now: the server's own shutdown would send a FIN first
            self._drop()
            return
        if answer is MetricsAnswer.SLOW and not self._proc.slow_wait(sim.slow_seconds):
            self._drop()
            return
        if not mounted:
            self._send(200, sim.metrics_text(), routes.METRICS_CONTENT_TYPE, handler="/metrics")
            return
        body = sim.metrics_text(names or ())
        headers: dict[str, str] = {}
        if page.gzip_accepted(self.headers.get("Accept-Encoding") or ""):
            body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
        self._send(200, body, routes.METRICS_CONTENT_TYPE, handler="/metrics", headers=headers)

    def _completion(self, path: str, raw: bytes) -> None:
        sim = self._sim
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._api_error(openai_api.ApiError(400, "BadRequestError", "Request body is not valid JSON."), path)
            return
        if self._proc.entry().engine_dead:  # EngineDeadError.CLIENT_MESSAGE, vLLM 0.33 and later
            self._api_error(openai_api.ApiError(500, "InternalServerError",
                                                "The server had an error while processing your request."), path)
            return
        request = openai_api.parse_completion(body, path == "/v1/chat/completions", sim.model)
        if isinstance(request, openai_api.ApiError):
            self._api_error(request, path)
            return
        if self._proc.entry().turns_away:  # RetryableRequestError, worded by create_error_response (0.33+)
            self._api_error(openai_api.ApiError(503, "ServiceUnavailableError",
                                                "Generation is paused. Please retry after it resumes."), path)
            return
        outcome = self._proc.complete(request.prompt_tokens, request.max_tokens, self._client_gone, WAIT_SLICE_SECONDS)
        if outcome is Outcome.SLEEPING:
            self._api_error(
                openai_api.ApiError(400, "BadRequestError", "The engine is sleeping; wake it up first."), path)
        elif outcome is Outcome.SERVED:
            self._send_json(200, openai_api.completion_payload(request, sim.model), handler=path)
        else:
            self._drop()

    # --- control -----------------------------------------------------------------------------------------------

    def _control(self, path: str, raw: bytes) -> None:
        """``/_sim/*``: steer the simulator from another process (vllm_simulator.control). Never recorded."""
        status, payload, close = control.answer(self._sim, self.command, path, raw, self.connection)
        if close:
            self.close_connection = True
        self._send_json(status, payload)
