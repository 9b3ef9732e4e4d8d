"""The agent's answers to an orchestrator's HTTP probes: GET /livez, /readyz, /startupz, from its latest verdict.

The long-running alternative to `check_vllm --probe` as an exec probe: a kubelet httpGet probe (or Docker's
`curl -f`) costs the vLLM container no Python start and the vLLM server no extra /metrics read, since the
agent judges at its own cadence and every probe only reads its latest judgement. The pass/fail rule is the
exec probe's own (check_vllm.probes.answers): 200 passes, 503 fails, the body is the same one line. An agent
whose loop has gone stale is a fault of ours: liveness and readiness pass, as they do for the exec probe.
"""

from __future__ import annotations

import http.server
import socket
from collections.abc import Callable, Sequence

from check_vllm.cli.peers import Network, peer_allowed
from check_vllm.probes import answers
from check_vllm.probes.answers import Seen

#: Path -> probe kind (the kubelet's conventional names, and the kinds' own).
PATHS = {"/livez": answers.LIVENESS, "/readyz": answers.READINESS, "/startupz": answers.STARTUP,
         **{answers.path(kind): kind for kind in answers.KINDS}}


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ProbeServer
    protocol_version = "HTTP/1.0"
    timeout = 2.0  # a peer that does not send its request line is closed

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        kind = PATHS.get(self.path.split("?", 1)[0])
        if kind is None:
            self._send(404, "not found: GET /livez, /readyz or /startupz\n")
            return
        answer = answers.answer(kind, self.server.seen())
        self._send(200 if answer.passed else 503, answer.line() + "\n")

    do_HEAD = do_GET  # noqa: N815

    def _send(self, status: int, body: str) -> None:
        data = body.encode("utf-8", "replace")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the kubelet probes every few s
        pass


class ProbeServer(http.server.ThreadingHTTPServer):
    """Answers GET /livez, /readyz, /startupz from `seen()`, to the allowed peers only."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], seen: Callable[[], Seen], allow: Sequence[Network] = ()) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.seen, self.allow = seen, tuple(allow)
        super().__init__(address, _Handler)

    def verify_request(self, request: object, client_address: object) -> bool:
        return peer_allowed(client_address, self.allow)
