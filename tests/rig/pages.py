"""Pages recorded from real vLLM servers (tests/fixtures/real/, tests/fixtures/real/<release>/) and one loopback
server that hands them out in order, so the installed check can be run against what a real server said."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "real"
#: What tests/real_vllm_matrix/record.py records of every release, in the order a server goes through them.
NAMES = ("idle", "saturated", "saturated_b", "frozen_a", "frozen_b", "restarted")
RELEASE_DIRS = sorted((d for d in REAL.iterdir() if d.is_dir() and re.fullmatch(r"\d+\.\d+\.\d+", d.name)),
                      key=lambda d: [int(x) for x in d.name.split(".")])
#: 0.32.0, the real_vllm tier's release, keeps its pages one level up (tests/fixtures/real/README.md).
DIRS = {"0.32.0": REAL, **{d.name: d for d in RELEASE_DIRS}}
RELEASES = sorted(DIRS, key=lambda r: [int(x) for x in r.split(".")])
MODELS = json.dumps({"object": "list", "data": [{"id": "tiny-llama"}]}).encode()
COMPLETION = json.dumps({"object": "text_completion", "model": "tiny-llama", "choices": [{"index": 0, "text": "x"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()


#: Pages recorded from a real llama.cpp llama-server (tests/fixtures/real/llamacpp/README.md).
LLAMA_CPP = REAL / "llamacpp"


#: What llama-server b11434 answers GET /metrics without --metrics (tools/server/server-context.cpp, get_metrics;
#: the error's JSON as format_error_response shapes it): HTTP 501.
METRICS_OFF = (501, json.dumps({"error": {
    "code": 501, "message": "This server does not support metrics endpoint. Start it with `--metrics`",
    "type": "not_supported_error"}}).encode())


def page(name: str, release: str = "0.32.0") -> str:
    return (DIRS[release] / f"{name}.txt").read_text()


def llamacpp_page(name: str) -> str:
    return (LLAMA_CPP / f"{name}.txt").read_text()


class PageServer(ThreadingHTTPServer):
    """/metrics hands out `queue` in order (the last repeats); /v1/models lists tiny-llama; every POST is a
    1-token completion; `log` lists (method, path). `restricted=False` answers the restricted page
    (/metrics/?name[]=...) 404, so the check falls back to the whole page; True serves the whole page for it."""

    daemon_threads = True

    def __init__(self, first: str, restricted: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.queue, self.log, self.restricted = [first], [], restricted
        #: Every GET's path and query as asked, the restricted page's 404s included.
        self.asked: list[str] = []
        #: Headers sent with each /metrics page (llama.cpp's Process-Start-Time-Unix, say).
        self.headers: dict[str, str] = {}
        #: (status, body) /metrics answers instead of a page: llama.cpp's 501 without --metrics (METRICS_OFF).
        self.metrics_off: tuple[int, bytes] | None = None
        #: What GET /props answers (llama.cpp's, with `is_sleeping`); None: 404.
        self.props: dict | None = None
        #: What GET /slots answers (llama.cpp's slot list); None: 404.
        self.slots: list | None = None
        #: (status, JSON body) every POST answers instead of a completion; None: a completion.
        self.post_answer: tuple[int, bytes] | None = None
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def hand_out(self, *pages: str) -> None:
        self.queue, self.log, self.asked = list(pages), [], []

    def __enter__(self) -> PageServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: PageServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        self.server.asked.append(self.path)
        if path == "/metrics" and self.path != "/metrics" and not self.server.restricted:
            self.send_error(404)
            return
        self.server.log.append(("GET", path))
        if path == "/metrics" and self.server.metrics_off is not None:
            self._send(self.server.metrics_off[1], "application/json; charset=utf-8", status=self.server.metrics_off[0])
        elif path == "/props" and self.server.props is not None:
            self._send(json.dumps(self.server.props).encode(), "application/json")
        elif path == "/slots" and self.server.slots is not None:
            self._send(json.dumps(self.server.slots).encode(), "application/json")
        elif path == "/metrics":
            q = self.server.queue
            self._send((q.pop(0) if len(q) > 1 else q[0]).encode(), "text/plain; version=0.0.4; charset=utf-8",
                       self.server.headers)
        elif path == "/v1/models":
            self._send(MODELS, "application/json")
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.server.log.append(("POST", self.path))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = self.server.post_answer or (200, COMPLETION)
        self._send(body, "application/json", status=status)

    def _send(self, body: bytes, ctype: str, headers: dict[str, str] | None = None, status: int = 200) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass
