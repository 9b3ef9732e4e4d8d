"""A process that looks like vLLM while it loads its model: `vllm serve tiny --port P` (a script named vllm,
run by this interpreter) that binds the port and never listens, so every connection is refused, as vLLM's
are until its engine is built; and one that serves (the simulator, idle) until SIGTERM, then closes its
listener and lives on for a while, as vLLM does while it stops. Shared by the tiers that test the server's
life outside the handler's restarts (tests/e2e/test_lifecycle.py, tests/handler/test_handler_lifecycle.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.rig.ports import free_port  # noqa: F401  (re-exported: one owner, tests/rig)

SCRIPT = """\
import re, socket, sys, time
if "--port" in sys.argv:
    port = int(sys.argv[sys.argv.index("--port") + 1])
else:  # `vllm serve --config FILE`: the port only in the YAML, as vLLM documents it
    port = int(re.search(r"^port: *(\\d+)", open(sys.argv[sys.argv.index("--config") + 1]).read(), re.M).group(1))
s = socket.socket()
s.bind(("127.0.0.1", port))  # bound, never listening
print("bound", flush=True)
time.sleep(600)
"""


STOPPING = """\
import signal, sys, threading, time
from vllm_simulator import Simulator
sim = Simulator(scenario="idle", port=int(sys.argv[sys.argv.index("--port") + 1])).start()
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
print("serving", flush=True)
stop.wait()
sim.set_scenario("dead")  # vLLM's graceful stop: the listener goes first, the process lingers
print("stopping", flush=True)
time.sleep(600)
"""


#: A proxy on this host in front of a vLLM that does not serve (yet): 502 with a page, as nginx says it
#: (`python -c PROXY PORT`).
PROXY = """\
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<html><body>502 Bad Gateway</body></html>"
        self.send_response(502); self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


REPO = Path(__file__).resolve().parents[2]


class Loaders:
    """Starts loading processes in `root`; `close()` kills whatever is left."""

    def __init__(self, root: Path) -> None:
        self.script = root / "bin" / "vllm"
        self.script.parent.mkdir(parents=True, exist_ok=True)
        self.script.write_text(SCRIPT)
        self.serving_script = root / "serving" / "vllm"
        self.serving_script.parent.mkdir(parents=True, exist_ok=True)
        self.serving_script.write_text(STOPPING)
        self.started: list[subprocess.Popen] = []

    def _start(self, script: Path, port: int, ready: str, config: Path | None = None) -> subprocess.Popen:
        # the serving one imports the simulator, which is in the checkout, not in the installed package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
        where = ["--config", config.name] if config is not None else ["--port", str(port)]
        proc = subprocess.Popen([sys.executable, str(script), "serve", "tiny", *where], stdout=subprocess.PIPE,
                                text=True, env=env, cwd=config.parent if config is not None else None)
        self.started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == ready
        return proc

    def __call__(self, port: int, program: str = "vllm") -> subprocess.Popen:
        """A process that is loading: bound, never listening; `program serve tiny --port P` (SGLang's server is
        `sglang serve`, and it listens only once its schedulers have loaded the model)."""
        script = self.script if program == "vllm" else self.script.parent.parent / f"bin-{program}" / program
        if not script.exists():
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(SCRIPT)
        return self._start(script, port, "bound")

    def with_config(self, port: int, config: Path) -> subprocess.Popen:
        """A loading process started `vllm serve tiny --config NAME` in NAME's folder, the port only in the file."""
        config.write_text(f"model: tiny\nport: {port}\nmax-model-len: 2048\n")
        return self._start(self.script, port, "bound", config)

    def serving(self, port: int) -> subprocess.Popen:
        """A process that serves until `stop(proc)`."""
        return self._start(self.serving_script, port, "serving")

    @staticmethod
    def stop(proc: subprocess.Popen) -> None:
        """SIGTERM, as supervisord or an operator sends it; returns once the listener is closed."""
        proc.terminate()
        assert proc.stdout is not None and proc.stdout.readline().strip() == "stopping"

    def close(self) -> None:
        for proc in self.started:
            proc.kill()
            proc.wait()


def loaders(root: Path) -> Iterator[Loaders]:
    """The body of a pytest fixture."""
    made = Loaders(root)
    try:
        yield made
    finally:
        made.close()
