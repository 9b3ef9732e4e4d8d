"""Purpose-built loopback servers: HTTP routes as plain functions, and raw TCP listeners that misbehave below HTTP.

Every server binds 127.0.0.1 port 0 and serves from daemon threads; each is a context manager that
closes its sockets, so a test that fails midway leaves nothing listening.
"""

from __future__ import annotations

import json
import socket
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vllm_simulator import Simulator

MODEL = "tiny-llama"
Answer = tuple[int, bytes, dict[str, str]]


def sim_page(sim: Simulator, edit: Callable[[str], str] | None = None) -> Callable[[], bytes]:
    """A /metrics source: the simulator's current page (counters move with its scenario), edited."""

    def page() -> bytes:
        text = sim.metrics_text().decode()
        return (edit(text) if edit else text).encode("utf-8", errors="surrogateescape")

    return page


# --------------------------------------------------------------------------- the HTTP server


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


def answer(status: int, body: bytes | str = b"", ctype: str = "text/plain; charset=utf-8",
           **headers: str) -> Answer:
    data = body.encode() if isinstance(body, str) else body
    return status, data, {"Content-Type": ctype, **{k.replace("_", "-"): v for k, v in headers.items()}}


def models_answer() -> Answer:
    doc = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm"}]}
    return answer(200, json.dumps(doc), "application/json")


def completion_answer() -> Answer:
    doc = {"id": "cmpl-1", "object": "text_completion", "model": MODEL,
           "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}],
           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return answer(200, json.dumps(doc), "application/json")


@dataclass
class Loopback:
    """An HTTP/1.1 server whose routes are plain functions: (handler) -> (status, body, headers), or None
    when the function wrote the answer itself (to stream, stall or drop)."""

    routes: dict[str, Callable[[BaseHTTPRequestHandler], Answer | None]] = field(default_factory=dict)
    tls: Any = None  # an ssl.SSLContext to serve https
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.routes.setdefault("GET /v1/models", lambda h: models_answer())
        self.routes.setdefault("POST /v1/completions", lambda h: completion_answer())
        self._stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                path = self.path.split("?")[0]
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 1 << 20))
                outer.seen.append(Seen(self.command, path, dict(self.headers)))
                route = outer.routes.get(f"{self.command} {path}")
                got = route(self) if route else answer(404, '{"detail":"Not Found"}', "application/json")
                if got is None:
                    self.close_connection = True
                    return
                status, body, headers = got
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    self.close_connection = True

            do_GET = do_POST = _any  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.stop_event = self._stop  # type: ignore[attr-defined]
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    @property
    def stopping(self) -> threading.Event:
        return self._stop

    def paths(self) -> list[str]:
        return [f"{s.method} {s.path}" for s in self.seen]

    def __enter__(self) -> Loopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


def metrics_from(page: Callable[[], bytes], ctype: str = "text/plain; version=0.0.4; charset=utf-8"
                 ) -> Callable[[BaseHTTPRequestHandler], Answer]:
    return lambda h: answer(200, page(), ctype)


# --------------------------------------------------------------------------- raw socket servers


class RawServer:
    """A TCP listener on loopback whose every connection is handed to `serve(conn, stop)` in a thread:
    for servers that misbehave below HTTP (never answer, stall mid-body, drip bytes)."""

    def __init__(self, serve: Callable[[socket.socket, threading.Event], None] | None) -> None:
        self.serve = serve
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.stop = threading.Event()
        self.conns: list[socket.socket] = []
        self.accepted = 0
        if serve is not None:
            threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            self.conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            assert self.serve is not None
            self.serve(conn, self.stop)
        except OSError:
            pass

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.sock.close()


def read_request(conn: socket.socket) -> bytes:
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def gzip_bomb(size: int) -> bytes:
    """`size` bytes of zeros, gzipped (~1000:1), built without holding them in memory."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip container
    block = b"0" * (1 << 20)
    return b"".join(z.compress(block) for _ in range(size >> 20)) + z.flush()
