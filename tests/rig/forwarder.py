"""A recording forwarder on loopback: what a proxy in front of a server would pass on, and the list of what the
check sent through it. Shared by the real tiers (vLLM's, llama.cpp's), where the server's own counters cannot say
which routes were asked."""

from __future__ import annotations

import http.server
import ssl
import threading

import httpx


class Recorder(http.server.ThreadingHTTPServer):
    """Forwards to `upstream`; `seen` lists (method, path with its query) of every request, in order, and
    `keys` the Authorization header each carried (None without). With `tls` (a server context) it serves https,
    as a TLS-terminating proxy in front of a server does."""

    daemon_threads = True

    def __init__(self, upstream: str, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream, self.seen, self.keys = upstream, [], []
        self.scheme = "https" if tls else "http"
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        """A client that refused our certificate is what a TLS test is made of: no traceback on stderr."""

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def paths(self) -> list[tuple[str, str]]:
        """`seen` without the queries."""
        return [(m, p.split("?")[0]) for m, p in self.seen]

    def inference(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.seen if m == "POST"]

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def _forward(self) -> None:
        self.server.seen.append((self.command, self.path))
        self.server.keys.append(self.headers.get("Authorization"))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
        try:
            resp = httpx.request(self.command, self.server.upstream + self.path, content=body, headers=headers,
                                 timeout=30)
        except httpx.HTTPError:
            self.send_error(502)
            return
        self.send_response(resp.status_code)
        self.send_header("Content-Type", resp.headers.get("content-type", "application/octet-stream"))
        self.send_header("Content-Length", str(len(resp.content)))
        self.end_headers()
        self.wfile.write(resp.content)

    do_GET = do_POST = _forward

    def log_message(self, *args: object) -> None:
        pass
