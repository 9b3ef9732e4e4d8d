"""A deadline for a whole HTTP exchange: httpx's timeouts are per read, which a dripping server outlasts.

Only a timer and a socket: fetch.py owns the request and the words for what went wrong.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

#: Seconds past a request's deadline before its watchdog cuts it; well within the second the check's
#: run keeps between its last request and its own alarm.
WATCHDOG_GRACE = 0.25


class Watchdog:
    """Ends an exchange at its deadline. httpx's read timeout restarts with every chunk, so a server that
    drips its answer (headers or body) outlasts any timeout and the run's own alarm fires first, leaving no
    verdict and no streak. At the deadline a timer thread shuts the connection down: the blocked read
    returns at once and the exchange reads as the time-out it is."""

    def __init__(self, deadline: float) -> None:
        self.deadline, self.fired, self.answered = deadline, False, False
        self._fd: int | None = None
        # a little after the deadline: where httpx's own read timeout applies, its clearer message wins
        self._timer = threading.Timer(max(deadline - time.monotonic(), 0.0) + WATCHDOG_GRACE, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace extension: a new connection's socket, as soon as it exists."""
        if event == "connection.connect_tcp.complete":
            self.watch(info.get("return_value"))

    def watch(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            self._fd = sock.fileno()
            if self.fired:
                self._fire()

    def _fire(self) -> None:
        self.fired = True
        if self._fd is None or self._fd < 0:
            return
        try:  # on a duplicate: the TLS object of the reading thread is left alone, the connection is not
            with socket.socket(fileno=os.dup(self._fd)) as dup:
                dup.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()
