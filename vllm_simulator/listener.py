"""The socket: a threading HTTP server bound to loopback, served from a daemon thread, that can cut its clients.

It is a real TCP listener on purpose: the check must meet connection refusals, keep-alive connections cut by
a dying process and answers that never come, and only a real socket shows those. A scenario that does not listen closes it;
coming back opens a new one on the same port.
"""

from __future__ import annotations

import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .handler import WAIT_SLICE_SECONDS, Handler

if TYPE_CHECKING:
    from .face import Face
    from .process import SimulatedProcess


class Listener:
    """One bound socket served from a daemon thread; a simulator opens a new one each time it comes back up."""

    def __init__(self, simulator: Face, process: SimulatedProcess, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._server = TrackingServer((host, port), Handler, simulator=simulator, process=process, family=family)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": WAIT_SLICE_SECONDS},
            name=f"vllm-simulator:{self.port}",
            daemon=True,
        )
        self._thread.start()

    def close(self, keep: socket.socket | None = None) -> None:
        """Stop accepting, then cut every open connection but ``keep``, as a dying process would."""
        self._server.shutdown()
        self._server.server_close()
        self._server.drop_connections(keep=keep)
        self._thread.join(timeout=5.0)


class TrackingServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its simulator and its open connections (so ``dead`` can cut them)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        simulator: Face,
        process: SimulatedProcess,
        family: socket.AddressFamily,
    ) -> None:
        self.address_family = family
        self.simulator = simulator
        self.process = process
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def drop_connections(self, keep: socket.socket | None = None) -> None:
        """Shut down every accepted connection but ``keep``, as a dying process would: clients see them close."""
        with self._connections_lock:
            connections = [c for c in self._connections if c is not keep]
            self._connections.clear()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet about clients that hang up; report anything else as socketserver would."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)
