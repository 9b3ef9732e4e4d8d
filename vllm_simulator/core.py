"""The ``Simulator``: the public face, the listener's life cycle and timed scenario switches.

What a scenario means comes from its table entry (``scenarios.py``), what the simulated process holds and how
it moves from ``process.py``; this class checks arguments, opens and closes the port and keeps the timer.
Any number of simulators can run in one test process: all state lives on the instance.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Final

from prometheus_client import generate_latest

from . import flavours
from .listener import Listener
from .llamacpp_engine import LlamacppOptions
from .page import registry_for, restricted
from .process import RecordedRequest, SimulatedProcess
from .scenarios import Scenario, lookup
from .sglang_engine import SglangOptions
from .sglang_server import Watchdog, any_stuck

FLAVOURS = flavours.NAMES

DEFAULT_BUSY_QUEUE_SECONDS: Final = 30.0


class Simulator:
    """A vLLM look-alike server on loopback; see the package docstring for why it exists.

    ``start()`` binds (port 0 picks a free port) and serves from a daemon thread.
    """

    def __init__(
        self,
        scenario: str = "idle",
        engines: int = 1,
        max_num_seqs: int = 2,
        legacy: bool = False,
        multiprocess: bool = False,
        model: str = "tiny-llama",
        slow_seconds: float = 10.0,
        host: str = "127.0.0.1",
        port: int = 0,
        busy_queue_seconds: float = DEFAULT_BUSY_QUEUE_SECONDS,
        flavour: str = "vllm",
        sglang: SglangOptions | None = None,
        llamacpp: LlamacppOptions | None = None,
    ) -> None:
        entry = lookup(scenario)
        self._row = row = flavours.lookup(flavour)
        settings = flavours.Settings(model, legacy, multiprocess, sglang or SglangOptions(),
                                     llamacpp or LlamacppOptions())
        engines = row.engine_count(settings, engines)
        row.check(entry, engines, max_num_seqs, legacy)
        self.model = model
        self.legacy = legacy
        self.slow_seconds = slow_seconds
        self.host = host
        self._port = port
        self._life = threading.RLock()  # listener open/close, the timer, started; taken before the process lock
        self._started = False
        self._listener: Listener | None = None
        self._timer: threading.Timer | None = None
        self._generation = 0  # bumps on every set_scenario so a stale timer does nothing
        self.flavour = flavour
        #: The flavour's pieces: its routes (the handler hands them every request), its page, its Server header.
        self.parts = parts = row.build(settings)
        #: The SGLang API server's state when the flavour is sglang, llama-server's when it is llamacpp (else None).
        self.sglang = parts.sglang
        self.llamacpp = parts.llamacpp
        self._watchdog = Watchdog(self.sglang.options.watchdog_timeout, self._watchdog_exit) if self.sglang else None
        self._process = SimulatedProcess(entry, engines, max_num_seqs, busy_queue_seconds, parts.engine)
        self._registry = registry_for(lambda: parts.families(self._process))

    # --- settings and state ------------------------------------------------------------------------------------

    @property
    def max_num_seqs(self) -> int:
        """Request slots per engine."""
        return self._process.max_num_seqs

    @property
    def busy_queue_seconds(self) -> float:
        """How long a real request queues in a busy engine before a background request frees a slot."""
        return self._process.busy_queue_seconds

    @property
    def port(self) -> int:
        """The TCP port (the real one after ``start()`` when 0 was asked for)."""
        return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    @property
    def scenario(self) -> str:
        """The name of the scenario in force."""
        return self._process.entry().name

    @property
    def engines(self) -> int:
        """Number of simulated engines (a scenario's ``min_engines`` raises it, and it stays there)."""
        return self._process.engine_count()

    @property
    def process_start_time(self) -> float:
        """Wall-clock start of the simulated process, as served in ``process_start_time_seconds``."""
        return self._process.start_time()

    # --- life cycle --------------------------------------------------------------------------------------------

    def start(self) -> Simulator:
        """Bind and serve in a daemon thread; if the scenario does not listen, the port is bound once, then closed."""
        with self._life:
            if self._started:
                raise RuntimeError("simulator already started")
            self._started = True
            self._process.set_stopping(False)
            self._open_listener()
            if not self._process.entry().listening:
                self._close_listener()
            self._arm_watchdog()
        return self

    def stop(self) -> None:
        """Close the listener and every open connection, and release requests waiting for a slot."""
        with self._life:
            self._cancel_timer()
            if self._watchdog is not None:
                self._watchdog.arm(False, self._generation)
            self._process.set_stopping(True)
            self._close_listener()
            self._started = False

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _open_listener(self) -> None:
        self._listener = Listener(self, self._process, self.host, self._port)
        self._port = self._listener.port

    def _close_listener(self, keep: socket.socket | None = None) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close(keep=keep)

    # --- scenarios ---------------------------------------------------------------------------------------------

    def set_scenario(self, name: str, *, seconds: float | None = None, then: str = "idle",
                     keep: socket.socket | None = None) -> None:
        """Switch scenario now (thread-safe); with ``seconds``, switch to ``then`` after that long. A port that
        closes spares connection ``keep`` (the control call that asked for the switch answers on it).

        The timed form exists for subprocess tests: a simulator made ``dead`` over HTTP cannot be reached to
        bring it back, so it brings itself back.
        """
        entry = self._checked(name)
        self._checked(then)
        with self._life:
            self._cancel_timer()
            self._generation += 1
            old = self._process.switch(entry)
            if self._started and not self._process.stopping:
                if old.listening and not entry.listening:
                    self._close_listener(keep=keep)
                elif entry.listening and not old.listening:
                    self._open_listener()
            if seconds is not None:
                timer = threading.Timer(seconds, self._timed_switch, args=(self._generation, then))
                timer.daemon = True
                self._timer = timer
                timer.start()
            self._arm_watchdog()

    def _checked(self, name: str) -> Scenario:
        """The table entry for ``name``, if this simulator can enter it (ValueError if not)."""
        entry = lookup(name)
        if self.legacy and entry.min_engines > 1:
            raise ValueError(f"{name} needs engine labels, which legacy (V0) metrics do not have")
        if self._row.refusal(entry, self.engines):
            raise ValueError(self._row.refusal(entry, self.engines))
        return entry

    def _timed_switch(self, generation: int, then: str) -> None:
        with self._life:
            if generation == self._generation and not self._process.stopping:
                self.set_scenario(then)

    def _arm_watchdog(self) -> None:
        """SGLang only: restart the scheduler watchdog's countdown after a switch (``_life`` held)."""
        if self._watchdog is not None:
            self._watchdog.arm(self._started and any_stuck(self._process.entry(), self.engines), self._generation)

    def _watchdog_exit(self, generation: int) -> None:
        """The watchdog fired: the server process tree is gone, as the scenario ``dead`` has it."""
        with self._life:
            if generation == self._generation and not self._process.stopping:
                self.set_scenario("dead")

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- process, request log and page -------------------------------------------------------------------------

    def restart(self) -> None:
        """Simulate a process restart: new start time, new ``_created`` values, every counter back to 0."""
        self._process.restart()

    def requests(self) -> list[RecordedRequest]:
        """A copy of the request log, oldest first."""
        return self._process.requests()

    def inference_requests(self) -> list[RecordedRequest]:
        """Only the requests that generate: what a check must not send while the server is busy (the POSTs to the
        completion endpoints; on SGLang also GET /health and /health_generate, each a real generation)."""
        return [r for r in self.requests() if self.parts.inference(r.method, r.path)]

    def clear_requests(self) -> None:
        """Forget the request log."""
        self._process.clear_requests()

    def metrics_text(self, names: Iterable[str] = ()) -> bytes:
        """The ``/metrics`` page as it would be served now (Prometheus text 0.0.4); with ``names``, only those
        samples, as vLLM's ``/metrics/?name[]=...`` serves them; a page written by hand (llama.cpp's) is whole."""
        if self.parts.page is not None:
            return self.parts.page(self._process)[0]
        return generate_latest(restricted(self._registry, names) if names else self._registry)
