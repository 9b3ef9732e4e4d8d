"""A server in router mode (check_vllm.contract.engines.Router: llama.cpp's `llama-server --models-dir`): one router
before a process per model, each started on demand. Its /metrics answers only for a model named, and a request
for a model not loaded would load it. So the server is read per loaded model, as data-parallel engines are: each
model's page is one engine of one Reading, keyed by the model's name, and every read and probe carries the
router's no-load query. A model not loaded is never named; one loading is not read (its process does not serve
yet). Nothing here raises: a Reading, or the Failure that says why there is none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import quote

from check_vllm.contract.engines import BY_KEY, Engine
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import MODELS_ANSWERED, MODELS_OK, EngineReading, Failure, Reading
from check_vllm.contract.vocab import NO_METRICS
from check_vllm.server import api
from check_vllm.server.fetch import request
from check_vllm.server.fetch_errors import FetchError

if TYPE_CHECKING:
    import httpx

    from check_vllm.contract.defaults import Options
    from check_vllm.server.fetch import Endpoint

#: Models read at most in one reading (a router runs --models-max, 4 by default, at once): a listing of thousands
#: is no reason for thousands of requests.
MAX_MODELS = 32


class Caller(Protocol):
    """What a router's read uses of the observation's calls (check_vllm.server.calls.Calls is them, and reads a
    router through this module): its client, each timeout cut to its deadline, the slots' mark, the liveness call;
    and the engine row a probe asks, which a read sets."""

    client: httpx.Client
    endpoint: Endpoint
    options: Options
    doing: Callable[[str], None]
    engine: Engine

    def left(self, cap: float | None) -> float: ...

    def exact(self, got: Reading, route: str) -> Reading: ...

    def liveness(self, kind: str, detail: str) -> Failure: ...


class Listed(NamedTuple):
    """What the router's listing says of its models, in its order."""

    #: Loaded and awake: read, and probed when idle.
    serving: tuple[str, ...]
    #: Loaded and asleep: read (its page comes from a cache, no task), never probed.
    sleeping: tuple[str, ...]
    #: Every other model by its state (unloaded, loading...): never named in a request.
    others: Counter[str]


def routed(failure: Failure) -> Engine | None:
    """The engine whose router answered /metrics (its words for a request that names no model), else None."""
    row = BY_KEY.get(failure.engine or "")
    words = row.routes.router.unnamed if row is not None else ""
    return row if row is not None and words and failure.kind == NO_METRICS and words in failure.detail else None


def query(row: Engine, model: str) -> str:
    """The query of a GET for `model` that never loads it."""
    return f"{row.routes.router.select}={quote(model, safe='')}&{row.routes.router.no_load}"


def _with(path: str, extra: str) -> str:
    return f"{path}?{extra}" if path else ""


def listed(doc: Any, row: Engine) -> Listed | None:
    """The models a listing names with their states (status.value), or None when it names no state at all."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    serving: list[str] = []
    sleeping: list[str] = []
    others: Counter[str] = Counter()
    for item in data:
        status = item.get("status") if isinstance(item, dict) else None
        name, state = (item.get("id"), status.get("value")) if isinstance(status, dict) else (None, None)
        if not isinstance(name, str) or not name or not isinstance(state, str):
            continue
        if state in row.routes.router.serving:
            serving.append(name)
        elif state in row.routes.router.sleeping:
            sleeping.append(name)
        else:
            others[clean(state, 20)] += 1
    if data and not (serving or sleeping or others):
        return None
    return Listed(tuple(serving), tuple(sleeping), others)


def _listing(calls: Caller, row: Engine, said: str) -> Listed | Failure:
    """GET the router's listing: its models, or the Failure of a listing that failed or says nothing."""
    route = row.routes.router.models
    calls.doing(f"GET {route}")
    try:
        resp = request(calls.client, calls.endpoint, "GET", route, calls.left(calls.options.metrics_timeout))
    except FetchError:
        return calls.liveness(NO_METRICS, said)._replace(engine=row.key)  # it tells down from silent
    got = listed(resp.json(), row) if resp.status == 200 else None
    if got is None:
        return Failure(NO_METRICS, f"{said}; {route} answered HTTP {resp.status} without its models' states",
                       models=MODELS_ANSWERED, engine=row.key)
    return got


def read(calls: Caller, row: Engine) -> Reading | Failure:
    """One reading of every model the router has loaded (a page each), merged; `calls.engine` becomes the row
    with the routes of the model a probe would ask (its no-load query on each)."""
    said = f"{row.name}'s router serves /metrics per model"
    models = _listing(calls, row, said)
    if isinstance(models, Failure):
        return models
    names = (*models.serving, *models.sleeping)[:MAX_MODELS]
    pages: dict[str, Reading] = {}
    refused: list[str] = []
    for name in names:
        q = query(row, name)
        calls.doing(f"GET /metrics of model {clean(name, 60)}")
        got = api.read_metrics(calls.client, calls.endpoint, calls.left(calls.options.metrics_timeout), row,
                               path=f"/metrics?{q}")
        if isinstance(got, Failure) and got.kind != NO_METRICS:  # silent or gone: the server's trouble, as any read's
            return got._replace(detail=f"{got.detail} (model {clean(name, 60)})", engine=got.engine or row.key)
        if isinstance(got, Failure):  # unloaded since the listing, or its page off: not this reading's
            refused.append(f"{got.detail} (model {clean(name, 60)})")
            continue
        pages[name] = calls.exact(got, _with(row.routes.slots, q))
    if not pages:
        return _none(row, models, refused)
    target = next((n for n in names if n in pages and n in models.serving), next(iter(pages)))
    q = query(row, target)
    calls.engine = row._replace(routes=row.routes._replace(asleep=_with(row.routes.asleep, q),
                                                           slots=_with(row.routes.slots, q)))
    return merged(pages, models, row, target)


def merged(pages: dict[str, Reading], models: Listed, row: Engine, target: str) -> Reading:
    """One Reading: each model's page one engine keyed by its name (a page with engines of its own: `name label`)."""
    engines: dict[str, EngineReading] = {}
    for name, page in pages.items():
        for label, engine in page.engines.items():
            engines.setdefault(clean(f"{name} {label}" if label else name, 60), engine)
    # the probe asks an awake model only: an asleep one would wake for it
    model = target if target in models.serving else None
    return Reading(engines=MappingProxyType(engines), model=model, engine=row.key)


def _none(row: Engine, models: Listed, refused: list[str]) -> Failure:
    """No page read: no model loaded (the check loads none), or every loaded one refused its page."""
    if refused:
        detail = refused[0] + (f"; {len(refused) - 1} more" if len(refused) > 1 else "")
    else:
        states = ", ".join(f"{n} {state}" for state, n in sorted(models.others.items())) or "none listed"
        detail = f"{row.name}'s router has no model loaded ({states}), and the check loads none"
    return Failure(NO_METRICS, detail, models=MODELS_OK, engine=row.key)
