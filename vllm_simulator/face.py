"""What the HTTP side (``listener``, ``handler``, ``control``) uses of the simulator it serves, and of the socket
server a request arrives on.

Protocols, so that none of those modules imports ``core``: the ``Simulator`` opens the listener, the listener
serves the handler, the handler asks ``control``, and imports run that one way, down to this module.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from .exchange import Served

if TYPE_CHECKING:
    from .flavours import Parts
    from .process import RecordedRequest, SimulatedProcess


class Face(Served, Protocol):
    """The simulator as its HTTP side sees it (``core.Simulator`` is one): its settings, page, log and scenario."""

    @property
    def parts(self) -> Parts: ...

    @property
    def legacy(self) -> bool: ...

    @property
    def engines(self) -> int: ...

    @property
    def scenario(self) -> str: ...

    @property
    def process_start_time(self) -> float: ...

    def metrics_text(self, names: Iterable[str] = ()) -> bytes: ...

    def requests(self) -> list[RecordedRequest]: ...

    def clear_requests(self) -> None: ...

    def restart(self) -> None: ...

    def set_scenario(self, name: str, *, seconds: float | None = None, then: str = "idle",
                     keep: socket.socket | None = None) -> None: ...


class Host(Protocol):
    """The socket server a request arrives on (``listener.TrackingServer`` is one): its simulator, and the open
    connections it keeps so that a dying simulator can cut them."""

    simulator: Face
    process: SimulatedProcess

    def track(self, connection: socket.socket) -> None: ...

    def untrack(self, connection: socket.socket) -> None: ...
