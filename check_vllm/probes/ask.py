"""`check_vllm --probe KIND --agent HOST:PORT`: the probe answered by a running `check_vllm_agent --probe-listen`,
at the cost of a Python start and one loopback request, else judged by this run as before.

Why: a probe that judges starts the interpreter, imports httpx and reads /metrics: ~0.2-0.3 s of CPU a run, so
liveness and readiness every 10 s cost ~5 % of a core (`tox -e bench`, 4b). The agent judges in one process at
its own cadence and keeps its verdict; asking it costs a few hundredths of that. But an agent that died or hangs
must never make the kubelet restart vLLM, which an httpGet probe on it would: here an agent that does not answer
as one does (refused, a time-out, anything but 200 or 503 with its one line) is a fault of ours, and this run
judges the server itself, saying why on its line.

Only the standard library's socket is imported here: the cost of asking is the point.
"""

from __future__ import annotations

import socket
import time
from typing import NamedTuple

from check_vllm.contract.safe_text import clean
from check_vllm.probes import answers

#: The agent answers from memory at once: one that takes longer is not answering.
ASK_TIMEOUT = 2.0
#: An agent's answer is one short line with its headers.
_MAX = 4096


class Asked(NamedTuple):
    """The agent's answer (answers.PASS or answers.FAIL, and its line), or code None and why it gave none."""

    code: int | None
    line: str


def ask(kind: str, address: str, timeout: float = ASK_TIMEOUT) -> Asked:
    """GET /KIND of the agent at `address`, within `timeout` seconds in all."""
    try:
        host, port = answers.host_port(address, answers.AGENT_PORT, answers.AGENT_OPTION)
    except ValueError as err:
        return Asked(None, str(err))
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(f"GET {answers.path(kind)} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode("ascii", "replace"))
            raw = _read(sock, deadline)
    except OSError as err:
        return Asked(None, "timed out" if isinstance(err, TimeoutError) else (err.strerror or type(err).__name__))
    return _answer(kind, raw)


def _read(sock: socket.socket, deadline: float) -> bytes:
    """Everything the agent sends until it closes (HTTP/1.0), at most _MAX bytes, by the deadline."""
    got = b""
    while len(got) <= _MAX:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(_MAX + 1 - len(got))
        if not chunk:
            break
        got += chunk
    return got


def _answer(kind: str, raw: bytes) -> Asked:
    """200 passes, 503 fails, when the body is the agent's line for this kind; anything else is no answer."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    code = {b"200": answers.PASS, b"503": answers.FAIL}.get(status[1]) \
        if len(status) >= 2 and status[0].startswith(b"HTTP/") else None
    lines = body.decode("utf-8", "replace").strip().splitlines()
    line = lines[0] if lines else ""
    if code is None or not line.startswith(f"{kind} "):
        said = status[1].decode("ascii", "replace") if len(status) >= 2 else "no status line"
        return Asked(None, f"not an agent's answer ({clean(said, 20)})")
    return Asked(code, clean(line, answers.LINE_CAP))
