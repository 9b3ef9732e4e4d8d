"""The simulator's flavours, one row each: whose server it looks like, and the pieces that make it so.

A row names its engine's counters (what the simulated process holds), its routes (None: vLLM's, in the handler
itself), its page (families for prometheus_client, or the text its server writes by hand), what its request log
counts as inference, and the scenarios it has no counterpart for. ``Simulator`` builds the row's pieces once and
asks them; no other module asks which flavour it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Final
from urllib.parse import SplitResult

from prometheus_client.core import Metric

from . import llamacpp_router, llamacpp_routes, sglang_routes
from .engine import EngineCounters
from .exchange import Exchange
from .llamacpp_engine import LlamacppEngine, LlamacppOptions
from .llamacpp_server import LlamacppServer
from .openai_api import INFERENCE_PATHS
from .process import SimulatedProcess
from .scenarios import EngineMode, Scenario
from .sglang_engine import SglangEngine, SglangOptions
from .sglang_page import render as render_sglang
from .sglang_server import SglangServer

#: A flavour's own routes: (the request, its URL, its body).
Routes = Callable[[Exchange, SplitResult, bytes], None]


@dataclass(frozen=True)
class Settings:
    """What a flavour's pieces are built from: the simulator's model and each flavour's options."""

    model: str
    legacy: bool = False  # vLLM 0.6-0.9's metric names
    multiprocess: bool = False  # vLLM's page in prometheus multiprocess mode
    sglang: SglangOptions = field(default_factory=SglangOptions)
    llamacpp: LlamacppOptions = field(default_factory=LlamacppOptions)


@dataclass(frozen=True)
class Parts:
    """One simulator's flavour pieces. ``families`` for prometheus_client, unless ``page`` writes it by hand."""

    families: Callable[[SimulatedProcess], list[Metric]]
    engine: Callable[[], EngineCounters] = EngineCounters
    routes: Routes | None = None
    page: Callable[[SimulatedProcess], tuple[bytes, int]] | None = None
    inference: Callable[[str, str], bool] = lambda method, path: method == "POST" and path in INFERENCE_PATHS
    server_header: str = "uvicorn"
    sglang: SglangServer | None = None
    llamacpp: LlamacppServer | None = None


@dataclass(frozen=True)
class Flavour:
    """One row: its name, a line for --help, how to build its pieces and what it cannot simulate."""

    name: str
    description: str
    build: Callable[[Settings], Parts]
    legacy: bool = False  # vLLM's V0 metric names can be asked for
    #: The engines its server has whatever was asked (llama.cpp: one, or one per model of a router); None: as asked.
    engines: Callable[[Settings], int] | None = None
    #: Scenario features its server has no counterpart for (a vLLM route, vLLM's sleep mode), by name.
    lacks: Callable[[Scenario], str] = lambda entry: ""

    def engine_count(self, settings: Settings, asked: int) -> int:
        """The engines a simulator of this flavour has; ValueError if another count than its own was asked."""
        if self.engines is None:
            return asked
        own = self.engines(settings)
        if asked not in (1, own):
            raise ValueError(f"a {self.name} server has {own} engine{'s' if own > 1 else ''}, not {asked}")
        return own

    def check(self, entry: Scenario, engines: int, max_num_seqs: int, legacy: bool) -> None:
        """ValueError if a simulator of this flavour cannot be made so."""
        if legacy and not self.legacy:
            raise ValueError(f"legacy (V0) metrics are vLLM's; the {self.name} flavour has its own")
        if engines < 1:
            raise ValueError("engines must be >= 1")
        if max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if legacy and max(engines, entry.min_engines) > 1:
            raise ValueError("legacy (V0) metrics have no engine label, so only one engine can be simulated")
        if self.refusal(entry, engines):
            raise ValueError(self.refusal(entry, engines))

    def refusal(self, entry: Scenario, engines: int = 1) -> str:
        """Why this flavour cannot enter ``entry`` with ``engines`` engines ("": it can)."""
        if self.engines is not None and entry.min_engines > engines:
            return f"{entry.name} needs {entry.min_engines} engines; this {self.name} server has {engines}"
        lacks = self.lacks(entry)
        return f"{entry.name} needs {lacks}, which the {self.name} flavour does not have" if lacks else ""


def _vllm(settings: Settings) -> Parts:
    return Parts(families=lambda proc: proc.families(settings.model, settings.legacy, settings.multiprocess))


def _sglang(settings: Settings) -> Parts:
    server = SglangServer(settings.sglang)

    def families(proc: SimulatedProcess) -> list[Metric]:
        return proc.locked(lambda engines, _, start: render_sglang(server.view(settings.model, engines, start)))

    return Parts(engine=partial(SglangEngine.started, settings.sglang), families=families, sglang=server,
                 routes=lambda ex, target, body: sglang_routes.dispatch(ex, server, target, body),
                 inference=lambda method, path: (method, path) in sglang_routes.INFERENCE)


def _llamacpp(settings: Settings) -> Parts:
    if settings.llamacpp.models:
        router = llamacpp_router.Router(settings.llamacpp)
        return Parts(families=lambda proc: [], engine=partial(LlamacppEngine.started, settings.llamacpp),
                     routes=lambda ex, target, body: llamacpp_router.dispatch(ex, router, target, body),
                     page=partial(llamacpp_routes.page, router.children[0]), inference=llamacpp_routes.is_inference,
                     server_header="llama.cpp")
    server = LlamacppServer(settings.llamacpp)
    return Parts(families=lambda proc: [], engine=partial(LlamacppEngine.started, settings.llamacpp), llamacpp=server,
                 routes=lambda ex, target, body: llamacpp_routes.dispatch(ex, server, target, body),
                 page=partial(llamacpp_routes.page, server), inference=llamacpp_routes.is_inference,
                 server_header="llama.cpp")


def _llamacpp_lacks(entry: Scenario) -> str:
    """vLLM's routes and its sleep mode (llama.cpp sleeps by its idle timer: LlamacppOptions.sleep_idle_seconds)."""
    if EngineMode.SLEEPING in entry.modes:
        return "vLLM's sleep mode (llama.cpp sleeps by --sleep-idle-seconds: LlamacppOptions)"
    vllm_only = {"/is_paused": entry.paused, "a 503 'Generation is paused'": entry.turns_away,
                 "/checkpoint/status": entry.checkpoint is not None, "the fault-tolerance status": bool(entry.faults),
                 "vLLM's /health 503": entry.engine_dead, "prometheus multiprocess mode": entry.multiprocess}
    return ", ".join(name for name, used in vllm_only.items() if used)


TABLE: Final = (
    Flavour("vllm", "vLLM's OpenAI server (the default)", _vllm, legacy=True),
    Flavour("sglang", "SGLang 0.5.23's metrics and routes", _sglang),
    Flavour("llamacpp", "llama.cpp llama-server b11434: its 6-digit page, 501 without --metrics, "
            "--sleep-idle-seconds, router mode", _llamacpp, engines=lambda s: max(1, len(s.llamacpp.models)),
            lacks=_llamacpp_lacks),
)
BY_NAME: Final = MappingProxyType({row.name: row for row in TABLE})
NAMES: Final = tuple(row.name for row in TABLE)


def lookup(name: str) -> Flavour:
    """The row for ``name``; ValueError (listing the known names) for anything else."""
    row = BY_NAME.get(name)
    if row is None:
        raise ValueError(f"unknown flavour {name!r}; known: {', '.join(NAMES)}")
    return row
