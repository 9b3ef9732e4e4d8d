"""The agent's answers to an orchestrator's HTTP probes: GET /livez, /readyz, /startupz, from its latest verdict;
and GET /metrics, the same verdicts for Prometheus (the page is made by check_vllm.haproxy.exposition).

The long-running alternative to `check_vllm --probe` as an exec probe: a kubelet httpGet probe (or Docker's
`curl -f`) costs the vLLM container no Python start and the vLLM server no extra /metrics read, since the
agent judges at its own cadence and every probe only reads its latest judgement. The pass/fail rule is the
exec probe's own (check_vllm.probes.answers): 200 passes, 503 fails, the body is the same one line. An agent
whose loop has gone stale is a fault of ours: liveness and readiness pass, as they do for the exec probe.
The agent's --metrics-listen is the same server without the probes' paths.
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
METRICS = "/metrics"
#: What GET /metrics answers: the page and its Content-Type.
Page = Callable[[], tuple[bytes, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ProbeServer
    protocol_version = "HTTP/1.0"
    timeout = 2.0  # a peer that does not send its request line is closed

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path, seen, metrics = self.path.split("?", 1)[0], self.server.seen, self.server.metrics
        if path == METRICS and metrics is not None:
            self._page(metrics)
            return
        kind = PATHS.get(path) if seen is not None else None
        if kind is None or seen is None:
            self._send(404, f"not found: GET {self.server.served}\n")
            return
        answer = answers.answer(kind, seen())
        self._send(200 if answer.passed else 503, answer.line() + "\n")

    do_HEAD = do_GET  # noqa: N815

    def _page(self, metrics: Page) -> None:
        try:
            data, content_type = metrics()
        except Exception as err:  # noqa: BLE001 - a bug of ours is an answer, never a traceback on the agent's stderr
            self._send(500, f"the metrics page failed: {err.__class__.__name__}\n")
            return
        self._send(200, data, content_type)

    def _send(self, status: int, body: str | bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body if isinstance(body, bytes) else body.encode("utf-8", "replace")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the kubelet probes every few s
        pass


class ProbeServer(http.server.ThreadingHTTPServer):
    """Answers GET /livez, /readyz, /startupz from `seen()` (None: not these), GET /metrics from `metrics()` (None:
    not it, and `no_metrics` says why), to the allowed peers only."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], seen: Callable[[], Seen] | None, allow: Sequence[Network] = (),
                 metrics: Page | None = None, no_metrics: str = "") -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.seen, self.metrics, self.allow = seen, metrics, tuple(allow)
        paths = [*(("/livez", "/readyz", "/startupz") if seen is not None else ()), *((METRICS,) if metrics else ())]
        self.served = ", ".join(paths) + (f" (GET {METRICS}: {no_metrics})" if no_metrics and not metrics else "")
        super().__init__(address, _Handler)

    def verify_request(self, request: object, client_address: object) -> bool:
        return peer_allowed(client_address, self.allow)
