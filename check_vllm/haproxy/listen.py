"""The agent's TCP side: every connection gets the latest answer at once, then is closed.

No I/O towards the backend happens here: the answer was judged by the loop (watch.py). HAProxy may send a
string first (`agent-send`); it is read and ignored after the reply, so closing never resets a connection
that still holds unread bytes (a reset can cost the peer the reply it had not read yet).
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable

#: Connections served at once; more are closed unanswered (HAProxy opens one per agent-inter and balancer).
MAX_CLIENTS = 32
#: Seconds a connection may stay open after its reply for the peer to close it.
LINGER = 1.0


class _Handler(socketserver.BaseRequestHandler):
    server: AgentServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        if not self.server.slots.acquire(blocking=False):
            return
        try:
            sock.settimeout(LINGER)
            sock.sendall(self.server.line().encode("ascii", "replace"))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):  # whatever agent-send wrote, until the peer closes
                pass
        except OSError:
            pass
        finally:
            self.server.slots.release()


class AgentServer(socketserver.ThreadingTCPServer):
    """A listener whose every connection is told `line()`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], line: Callable[[], str]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.line = line
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _Handler)


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """HOST:PORT, [V6]:PORT, :PORT or PORT -> (host, port); ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port:
        port = str(default_port)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: the port must be a number from 1 to 65535")
    return host, int(port)
