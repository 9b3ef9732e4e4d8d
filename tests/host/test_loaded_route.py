"""A llama-server whose decode loop hangs before the check's first reading (issue 52): its /metrics is a task of
that loop and never answers, while its /health answers 200 from the HTTP side once the model is loaded (503
"Loading model" before). The host sees a young process that never served, which alone reads `starting` for
the 900 s of --start-grace; its own /health says it has loaded, so the check judges its silence instead. A
real process named llama-server (exec -a) on a loopback port, the installed check."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.ports import free_port
from tests.rig.scripts import Result, run_check

pytestmark = pytest.mark.host

#: llama-server's routes as a hung decode loop leaves them: /health answers (200 loaded, 503 loading), /metrics
#: and the rest never do.
SERVER = """
import http.server, sys, time
LOADED = sys.argv[sys.argv.index("--loaded") + 1]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/health":
            body = {"yes": b'{"status":"ok"}', "proxy": b"OK"}.get(LOADED, b'{"error":{"message":"Loading model"}}')
            self.send_response(503 if LOADED == "no" else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            time.sleep(60)
http.server.ThreadingHTTPServer.daemon_threads = True
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), H)
print("in", flush=True)
server.serve_forever()
"""


@pytest.fixture
def llama(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen] = []

    def start(loaded: str) -> str:
        port = free_port()
        script = tmp_path / "server.py"
        script.write_text(SERVER)
        proc = subprocess.Popen(["bash", "-c", f'exec -a llama-server {sys.executable} {script} --port {port} '
                                 f'--loaded {loaded}'], stdout=subprocess.PIPE)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"in\n"
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def check(state: Path, url: str) -> Result:
    return run_check(state, "-u", url, "-t", "6")


def test_a_loaded_llama_server_whose_loop_hangs_is_judged_on_its_silence_not_starting(llama, tmp_path):
    r = check(tmp_path / "state", llama("yes"))
    assert r.first.startswith("LLAMACPP WARNING - unresponsive: "), r.out
    assert "starting" not in r.first, r.out


@pytest.mark.parametrize("health", ["no", "proxy"], ids=["loading: 503", "a proxy's own 200 OK"])
def test_a_llama_server_still_loading_is_starting(llama, tmp_path, health):
    r = check(tmp_path / "state", llama(health))
    assert r.first.startswith("LLAMACPP WARNING - starting: llama.cpp process "), r.out
