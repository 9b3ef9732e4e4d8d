"""The agent's TCP side: every allowed connection gets the latest answer at once, then is closed.

No I/O towards the backend happens here: the answer was judged by the loop (watch.py). HAProxy may send a
string first (`agent-send`); it is read and ignored after the reply, so closing never resets a connection
that still holds unread bytes (a reset can cost the peer the reply it had not read yet).

A peer is never waited for before its answer, and never for more than DEADLINE in all after it: a peer
that trickles a byte now and then (each recv answered, so a per-recv timeout never fires) is closed at the
deadline. Waiting for peers to close takes one of MAX_CLIENTS slots; a connection that finds them all
taken still gets its answer, and is closed at once. With `allow`, a peer from another address is closed
before any thread or byte is spent on it.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Sequence

from check_vllm.cli.peers import Network, peer_allowed
from check_vllm.probes.answers import host_port

#: Connections that may wait at once for their peer to close after the reply; more are answered and closed.
MAX_CLIENTS = 32
#: Seconds in all a connection may stay open after its reply for the peer to close it.
DEADLINE = 1.0
#: Bytes of agent-send read after the reply, at most (HAProxy sends a short line).
MAX_READ = 64 * 1024



class _Handler(socketserver.BaseRequestHandler):
    server: AgentServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        deadline = time.monotonic() + DEADLINE
        try:
            sock.settimeout(DEADLINE)
            sock.sendall(self.server.line().encode("ascii", "replace"))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        if not self.server.slots.acquire(blocking=False):
            _drain(sock, deadline=0.0)  # what already arrived only: no slot to wait in
            return
        try:
            _drain(sock, deadline)
        finally:
            self.server.slots.release()


def _drain(sock: socket.socket, deadline: float) -> None:
    """Read and drop what the peer sends until it closes, MAX_READ bytes or `deadline` (monotonic) pass."""
    read = 0
    try:
        while read < MAX_READ:
            left = deadline - time.monotonic()
            if left <= 0:
                sock.setblocking(False)
            else:
                sock.settimeout(left)
            chunk = sock.recv(4096)
            if not chunk:
                return
            read += len(chunk)
    except OSError:  # includes the timeout and "nothing more there" of a non-blocking read
        pass


class AgentServer(socketserver.ThreadingTCPServer):
    """A listener whose every allowed connection is told `line()`."""

    daemon_threads = True
    allow_reuse_address = True
    #: socketserver's 5 would leave a burst of peers (HAProxy's among them) waiting for a SYN retry.
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: tuple[str, int], line: Callable[[], str], allow: Sequence[Network] = ()) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.line = line
        #: Empty: every peer that reaches the port. Otherwise only these, loopback included only if listed.
        self.allow = tuple(allow)
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _Handler)

    def verify_request(self, request: object, client_address: object) -> bool:
        """Refused peers are closed by socketserver at once, in the accepting thread, unanswered."""
        return peer_allowed(client_address, self.allow)


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """--listen's HOST:PORT, [V6]:PORT, :PORT or PORT -> (host, port); ValueError with the reason."""
    return host_port(text, default_port, "--listen")
