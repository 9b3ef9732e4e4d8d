"""A process that looks like vLLM while it loads its model: `vllm serve tiny --port P` (a script named vllm,
run by this interpreter) that binds the port and never listens, so every connection is refused, as vLLM's
are until its engine is built. Shared by the tiers that test the server's life outside the handler's
restarts (tests/e2e/test_lifecycle.py, tests/monitoring/test_handler_lifecycle.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SCRIPT = """\
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])))  # bound, never listening
print("bound", flush=True)
time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Loaders:
    """Starts loading processes in `root`; `close()` kills whatever is left."""

    def __init__(self, root: Path) -> None:
        self.script = root / "bin" / "vllm"
        self.script.parent.mkdir(parents=True, exist_ok=True)
        self.script.write_text(SCRIPT)
        self.started: list[subprocess.Popen] = []

    def __call__(self, port: int) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, str(self.script), "serve", "tiny", "--port", str(port)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "bound"
        self.started.append(proc)
        return proc

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
