"""What a flavour's routes may use of the HTTP handler that called them: one request and its answer.

A Protocol, so that a flavour's routes module need not import the handler (which imports the simulator): the
handler hands itself over, the routes decide what to answer, and imports stay one way. Also the request body's
reader, which every route's request goes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from email.message import Message
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .process import SimulatedProcess


class Served(Protocol):
    """The simulator's settings a route reads."""

    @property
    def model(self) -> str: ...

    @property
    def slow_seconds(self) -> float: ...

    @property
    def max_num_seqs(self) -> int: ...


class Exchange(Protocol):
    """One request being answered (``handler.Handler`` is one)."""

    command: str
    last_status: int | None
    close_connection: bool
    headers: Message

    @property
    def _sim(self) -> Served: ...

    @property
    def _proc(self) -> SimulatedProcess: ...

    def _send(self, status: int, body: bytes, content_type: str, *, handler: str | None = None,
              headers: Mapping[str, str] = ...) -> None: ...

    def _send_json(self, status: int, payload: Any, *, handler: str | None = None) -> None: ...

    def _metrics(self, *, mounted: bool = False, names: list[str] | None = None) -> None: ...

    def _drop(self) -> None: ...

    def _client_gone(self) -> bool: ...


def read_body(headers: Message, rfile: BufferedIOBase, limit: int) -> bytes:
    """The request body, chunked or not; ValueError past ``limit`` bytes."""
    if "chunked" not in (headers.get("Transfer-Encoding") or "").lower():
        length = int(headers.get("Content-Length") or 0)
        if length > limit:
            raise ValueError("request body too large")
        return rfile.read(length) if length > 0 else b""
    chunks: list[bytes] = []
    size = 0
    while True:
        line = rfile.readline(64)
        length = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if length == 0:
            rfile.readline(64)
            return b"".join(chunks)
        size += length
        if size > limit:
            raise ValueError("request body too large")
        chunks.append(rfile.read(length))
        rfile.readline(64)
