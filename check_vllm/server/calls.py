"""The server's calls of one observation, each with its timeout cut to what the caller's deadline leaves (a
slow server earns a specific verdict, not the caller's blunt time-out), and which /metrics page to ask for.

Each read asks for the restricted /metrics page (check_vllm.server.api). A server whose restricted page fails
where the whole page works is read by the whole page from then on (the memory says since when; the run that
found out re-reads at once and loses nothing), and asked the restricted page again after RESTRICTED_RETRY: a
server may be upgraded.

A router (llama.cpp's router mode) answers /metrics without a model with its own words: from then on, for the
rest of the observation, it is read per loaded model, and the probe asks a loaded model with its no-load query
(check_vllm.server.router). Found again on every run: the bare /metrics it costs is answered by the router itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import MappingProxyType

import httpx

from check_vllm.contract.defaults import RUN_TIMEOUT, Options
from check_vllm.contract.engines import AUTO, BY_KEY, BY_NAME, VLLM, Engine
from check_vllm.contract.instants import Instant, elapsed, instant
from check_vllm.contract.values import ENGINE_DEAD, NO_ANSWER, REJECTED, Failure, ProbeOutcome, Reading
from check_vllm.contract.vocab import NO_METRICS
from check_vllm.server import api, router, slots
from check_vllm.server.fetch import Endpoint
from check_vllm.server.fetch_errors import FetchError

#: Seconds a server that failed the restricted read is read by its whole page before it is asked again.
RESTRICTED_RETRY = 3600.0


class Calls:
    """The server's calls, each with its timeout cut to the deadline; which /metrics page to ask for."""

    def __init__(self, client: httpx.Client, endpoint: Endpoint, options: Options, deadline: float,
                 doing: Callable[[str], None], now: Callable[[], Instant | float], whole_page: Instant | None,
                 known: str | None = None) -> None:
        self.client, self.endpoint, self.options, self.deadline = client, endpoint, options, deadline
        self.doing, self.now = doing, now
        #: Since when this server is read by its whole page (None: the restricted one); the memory carries it.
        self.whole_page = whole_page
        #: The engine --engine names (None: each page says which it is).
        self.named: Engine | None = None if options.engine == AUTO else BY_KEY[options.engine]
        #: The engine of the newest reading (the named one, else the one the memory knows, else vLLM's): whose
        #: routes may be asked, and whose restricted page.
        self.engine: Engine = self.named or BY_KEY.get(known or "", VLLM)
        #: The engine whose router this server is (its /metrics asked which model), None: no router.
        self.router: Engine | None = None

    def left(self, cap: float | None) -> float:
        """A request's timeout: its cap, never beyond the deadline (no cap: what the deadline leaves)."""
        room = self.deadline - time.monotonic()
        if cap is None:
            cap = room if math.isfinite(room) else RUN_TIMEOUT
        return max(min(cap, room), 0.1)

    def _restricted(self) -> bool:
        """Ask for the restricted page: always, unless it failed here less than RESTRICTED_RETRY ago, or the engine
        known has none."""
        if not self.engine.routes.metrics_filter:
            return False
        if self.whole_page is None:
            return True
        since = elapsed(self.whole_page, instant(self.now()))
        return since is None or not 0 <= since < RESTRICTED_RETRY  # another boot or a clock step: ask again

    def metrics(self) -> Reading | Failure:
        """Every read of a run alike: a page that is not vLLM's is followed by /v1/models for liveness; a router's
        answer by a read of each model it has loaded."""
        if self.router is not None:
            return self._routed(self.router)
        self.doing("GET /metrics")
        got: Reading | Failure | None = None
        asked = self._restricted()
        if asked:
            restricted = api.read_restricted(self.client, self.endpoint, self.left(self.options.metrics_timeout),
                                             self.named, self.engine)
            got = restricted.got
            if isinstance(got, Reading):  # the restricted page works (again); a redirect got us the whole page
                self.whole_page = None if restricted.as_asked else instant(self.now())
        if got is None:
            got = api.read_metrics(self.client, self.endpoint, self.left(self.options.metrics_timeout), self.named)
            if asked and isinstance(got, Reading):  # the URL was at fault, not the server: the whole page from now on
                self.whole_page = instant(self.now())
        if isinstance(got, Failure) and got.kind == NO_METRICS:
            self.router = router.routed(got)
            if self.router is not None:
                return self._routed(self.router)
            live = self.liveness(NO_METRICS, got.detail)  # its model list may say whose it is where the page did not
            return live._replace(engine=got.engine or live.engine)
        if isinstance(got, Reading):
            asked_for, self.engine = self.engine, BY_KEY.get(got.engine, VLLM)
            if self.engine is not asked_for:  # another engine's restricted page failed: ask its own next time
                self.whole_page = None
            if not self.engine.routes.metrics_filter:  # an engine that has none: never asked while it serves
                self.whole_page = instant(self.now())
            got = self.exact(got, self.engine.routes.slots)
        return got

    def _routed(self, row: Engine) -> Reading | Failure:
        """A read of a router: one reading of its loaded models' pages (check_vllm.server.router)."""
        got = router.read(self, row)
        if isinstance(got, Reading) and not row.routes.metrics_filter:  # never its restricted page while it serves
            self.whole_page = instant(self.now())
        return got

    def exact(self, got: Reading, route: str) -> Reading:
        """A page whose progress counters printed too coarsely while work is present: the slots' exact mark, where
        its engine has such a `route` (one engine a page: llama.cpp's), stands in for them."""
        coarse = [name for name, e in got.engines.items() if e.coarse and e.work > 0]
        if not route or len(got.engines) != 1 or not coarse:
            return got
        self.doing(f"GET {route}")
        seen = slots.mark(self.client, self.endpoint, route, self.left(self.options.metrics_timeout))
        if seen is None:
            return got
        return got._replace(engines=MappingProxyType({coarse[0]: got.engines[coarse[0]]._replace(slots=seen,
                                                                                               coarse=None)}))

    def liveness(self, kind: str, detail: str) -> Failure:
        self.doing("GET /v1/models")
        return api.liveness(self.client, self.endpoint, kind, detail, self.left(self.options.metrics_timeout))

    def probe(self, model: str | None) -> ProbeOutcome:
        query = self.router.routes.router.no_load if self.router is not None else ""
        if not model and self.router is not None:  # the router lists models it has not loaded: never ask those
            return ProbeOutcome(REJECTED, 0.0, f"no model to probe: none of {self.router.name}'s router's loaded "
                                "models is awake, and the check loads none")
        if not model:
            self.doing("GET /v1/models")
            try:
                model = api.first_model(self.client, self.endpoint, self.left(self.options.metrics_timeout))
            except FetchError as err:
                return ProbeOutcome(REJECTED, 0.0, f"no model to probe: {err.detail}")
        self.doing(f"the probe (POST /v1/completions, up to {self.options.probe_timeout:g} s)")
        budget = self.left(self.options.probe_timeout)
        outcome = api.complete(self.client, self.endpoint, model or "", budget, budget >= self.options.probe_timeout,
                               query)
        if outcome.kind == NO_ANSWER and outcome.status is not None and self.engine_dead():
            return outcome._replace(kind=ENGINE_DEAD, detail=f"{outcome.detail}; GET /health answered 503")
        return outcome

    def says_loaded(self, engine: str) -> bool:
        """The server's own route says its model is loaded (Routes.loaded of the engine the host's process names;
        "": it has none, never asked)."""
        route = BY_NAME[engine].routes.loaded if engine in BY_NAME else ""
        if not route:
            return False
        self.doing(f"GET {route}")
        return api.answers_loaded(self.client, self.endpoint, route, self.left(None))

    def engine_dead(self) -> bool:
        """Asked after a 5xx only (a time-out is an event loop too busy to tell), of an engine whose server has
        such a route: a dead engine's words changed in vLLM 0.33, its GET /health did not. And only vLLM's own API
        server proves it: it keeps serving /metrics with a dead engine, while a proxy before a server it cannot
        reach (Caddy: an empty 503 for everything) answers /health as it answers the rest, so /metrics is read
        once more, and must answer."""
        route = self.engine.routes.engine_dead
        if not route:
            return False
        self.doing(f"GET {route}")
        if not api.engine_dead(self.client, self.endpoint, route, self.left(None)):
            return False
        return isinstance(self.metrics(), Reading)
