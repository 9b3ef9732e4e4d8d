"""The three vLLM calls the check makes: GET /metrics, GET /v1/models, and the 1-token probe.

Each returns a value of check_vllm.contract.values and never raises: a Reading or the Failure that explains
why there is none; the liveness /v1/models gives; the ProbeOutcome with its one kind. The probe is a
real completion, so it takes a request slot: it is sent only to an idle engine.

/metrics comes in two sizes. The whole page (~50 KB on vLLM 0.32, ~8 ms of the API server's CPU on
the event loop that serves the users) is vLLM's own route, which ignores any query. The restricted
page is prometheus_client's app, which vLLM mounts at /metrics/ beside it: it honours `name[]` by
sample name and returns only the series check_vllm.server.reading reads (~4 KB, under 1 KB gzipped, a fifth
of the CPU: tests/real_vllm/test_restricted_real.py measures it).
"""

from __future__ import annotations

from typing import NamedTuple

import httpx

from check_vllm.contract.engines import ENGINES, VLLM, Engine
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import (
    ANSWERED,
    CUT_SHORT,
    ENGINE_DEAD,
    ENGINE_PAUSED,
    MODELS_ANSWERED,
    MODELS_OK,
    NO_ANSWER,
    REFUSED,
    REJECTED,
    Failure,
    ProbeOutcome,
    Reading,
)
from check_vllm.contract.vocab import DOWN, NO_METRICS, PROTOCOL, UNREACHABLE, UNRESPONSIVE
from check_vllm.server import answers, reading
from check_vllm.server.fetch import Endpoint, request
from check_vllm.server.fetch_errors import FetchError
from check_vllm.server.reading import NotMetrics, owned, parse

PROBE_PROMPT = "Hi"
#: What vLLM's API server says once its EngineCore has died (vllm.v1.engine.exceptions.EngineDeadError), up to
#: 0.32. From 0.33 on it says only "The server had an error while processing your request." (its
#: CLIENT_MESSAGE, type InternalServerError), which any 500 may say: GET /health tells (engine_dead).
ENGINE_DEAD_SIGNS = ("EngineCore encountered an issue", "EngineDeadError", "Engine loop is not running")
#: What vLLM >= 0.33 answers a request it turns away while paused (mode wait or abort, a checkpoint): HTTP 503
#: {"error": {"type": "ServiceUnavailableError", "message": PAUSED_MESSAGE, "code": 503}}. The engine's
#: RequestError(code="engine_paused") (vllm/v1/engine/core.py EngineCoreProc._reject_add_while_paused) becomes
#: RetryableRequestError (vllm/outputs.py RequestError.to_exception), worded by
#: vllm/entrypoints/serve/exception_handling/error_response.py create_error_response. Any other 503 is no pause.
PAUSED_TYPE, PAUSED_MESSAGE = "ServiceUnavailableError", "Generation is paused."
#: Seconds GET /health may take when asked whether the engine died: vLLM answers it without a round trip to the
#: engine (a flag the API server keeps), so a slow answer is an event loop too busy to tell.
HEALTH_TIMEOUT = 2.0


def _unreached(err: FetchError) -> str | None:
    """The verdict word for a request that reached no server: nothing listens, we cannot get there, or this
    host could not send it (never the server's silence); or one whose peer does not speak HTTP."""
    return {"down": DOWN, "unreachable": UNREACHABLE, "client": UNREACHABLE, "not http": PROTOCOL}.get(err.kind)


#: The whole page.
WHOLE = "/metrics"
def restricted_path(row: Engine) -> str:
    """Only the samples check_vllm.server.reading reads of `row`'s page (`_created` and process_start_time_seconds
    included), sorted: one URL, the same on every run. `name[]` goes percent-encoded: a bracket is not allowed in
    a query (RFC 3986), and strict proxies and servers refuse it bare."""
    return "/metrics/?" + "&".join(f"name%5B%5D={name}" for name in sorted(reading.restrictable(row)))


#: vLLM's restricted page: what a server whose engine is not known yet is asked first.
RESTRICTED = restricted_path(VLLM)


def read_metrics(client: httpx.Client, endpoint: Endpoint, timeout: float, named: Engine | None = None,
                 path: str = WHOLE) -> Reading | Failure:
    """GET the whole /metrics page once (`path`: with a router's query): a Reading, or the Failure that explains
    why there is none. `named`: the engine --engine names (None: the page says)."""
    return _read(client, endpoint, path, timeout, named)[0]


class Restricted(NamedTuple):
    """What one GET of the restricted page gave."""

    #: A Reading; a Failure where the whole page could not do better (nothing listens, no answer in
    #: time); None where the URL itself may be at fault: read the whole page instead.
    got: Reading | Failure | None
    #: False when the URL is not served as asked here (None above, or a redirect that led to a page).
    as_asked: bool = True


def read_restricted(client: httpx.Client, endpoint: Endpoint, timeout: float, named: Engine | None = None,
                    row: Engine = VLLM) -> Restricted:
    """GET the restricted page once. The URL may be at fault on a 4xx, a 5xx, a page without the families
    asked for or a redirect gone wrong (an older vLLM, a proxy that routes only /metrics or strips the
    query); a redirect that led to a page means the same, though that page is read. A page with more
    than was asked for (a server that ignores the filter) is a Reading like any other. `row`: the engine this
    server's pages showed (vLLM's where none did yet); `named`: --engine's."""
    got, at_fault, redirected = _read(client, endpoint, restricted_path(named or row), timeout, named)
    if at_fault:
        return Restricted(None, False)
    return Restricted(got, not redirected)


def _read(client: httpx.Client, endpoint: Endpoint, path: str, timeout: float, named: Engine | None
          ) -> tuple[Reading | Failure, bool, bool]:
    """(what one GET of `path` gave, whether another URL might do better, whether it was redirected).
    Failures name /metrics, never the query: it is long, and an operator knows the endpoint by that name."""
    try:
        resp = request(client, endpoint, "GET", path, timeout)
    except FetchError as err:
        detail = err.detail.replace(path, WHOLE)
        unreached = _unreached(err)
        if unreached:
            return Failure(unreached, f"{detail} ({endpoint.shown})"), False, False
        if err.kind == "timeout":
            return Failure(UNRESPONSIVE, detail), False, False
        if err.kind in ("too large", "redirect", "encoding"):  # the page is not where we were told: no metrics
            return Failure(NO_METRICS, detail), True, False
        return Failure(UNRESPONSIVE, detail), True, False
    answer = answers.not_a_page(resp.status, resp.text(), named, keyed=bool(endpoint.api_key))
    if answer is not None:
        return answer[0], answer[1], False
    try:
        return owned(parse(resp.text(), named), resp.headers), False, resp.redirects > 0
    except NotMetrics as err:
        kind = resp.content_type.split(";")[0].strip() or "no content type"
        kind = clean(kind, 60)
        detail = f"/metrics is not {(named or VLLM).name}'s ({clean(str(err), 160)}; {kind}, {len(resp.body)} bytes)"
        return Failure(NO_METRICS, detail), True, False


def first_model(client: httpx.Client, endpoint: Endpoint, timeout: float) -> str | None:
    """The first model id /v1/models lists, as listed (the probe asks for it: a cut or folded id is a 404;
    whoever shows it cleans it). Raises FetchError when the endpoint does not answer."""
    return _first_card(client, endpoint, timeout)[0]


def _first_card(client: httpx.Client, endpoint: Endpoint, timeout: float) -> tuple[str | None, str | None]:
    """(the first model's id, the key of the engine its `owned_by` names: None when it names none)."""
    resp = request(client, endpoint, "GET", "/v1/models", timeout)
    if resp.status != 200:
        raise FetchError("status", f"/v1/models answered HTTP {resp.status}", resp.status)
    doc = resp.json()
    try:
        card = doc["data"][0]
        model = card["id"]
    except (TypeError, KeyError, IndexError):
        raise FetchError("no models", "/v1/models did not list any model") from None
    owner = card.get("owned_by") if isinstance(card, dict) else None
    engine = next((row.key for row in ENGINES if row.owned_by == owner), None)
    return (str(model) if isinstance(model, (str, int)) and not isinstance(model, bool) else None), engine


def liveness(client: httpx.Client, endpoint: Endpoint, kind: str, detail: str, timeout: float) -> Failure:
    """Liveness from /v1/models alone, for when /metrics cannot tell (or must not be read)."""
    try:
        model, engine = _first_card(client, endpoint, timeout)
    except FetchError as err:
        unreached = _unreached(err)
        why = f"{err.detail} ({endpoint.shown})" if unreached else err.detail
        answered = err.kind in ("redirect", "no models", "too large", "encoding") or (
            err.kind == "status" and err.status is not None and err.status < 500)
        if answered:
            return Failure(kind, f"{detail}; {why}" if detail else why, models=MODELS_ANSWERED)
        return Failure(kind, f"{detail}; /v1/models failed too: {why}" if detail else why,
                       models=unreached or UNRESPONSIVE)
    return Failure(kind, detail, models=MODELS_OK, model=model, engine=engine)


#: What llama-server's /health answers once its model is loaded (tools/server: {"status": "ok"}).
LOADED_BODY = {"status": "ok"}


def answers_loaded(client: httpx.Client, endpoint: Endpoint, route: str, timeout: float) -> bool:
    """GET `route` answers 200 with the engine's own words for loaded, within HEALTH_TIMEOUT (from the HTTP side,
    never a task): a proxy's own health page says nothing of the server."""
    try:
        got = request(client, endpoint, "GET", route, min(timeout, HEALTH_TIMEOUT))
        return got.status == 200 and got.json() == LOADED_BODY
    except (FetchError, ValueError):
        return False


def engine_dead(client: httpx.Client, endpoint: Endpoint, route: str, timeout: float) -> bool:
    """GET `route` (vLLM's /health: Engine.routes.engine_dead) says the engine died: vLLM answers 503 with an
    empty body then. A proxy's 502/503 (a page, not vLLM's empty answer), a time-out or anything else says
    nothing: asked only when a probe or a read has already failed."""
    try:
        resp = request(client, endpoint, "GET", route, min(timeout, HEALTH_TIMEOUT))
    except FetchError:
        return False
    return resp.status == 503 and not resp.body.strip()


def complete(client: httpx.Client, endpoint: Endpoint, model: str, timeout: float, full: bool = True,
             query: str = "") -> ProbeOutcome:
    """Send one completion of max_tokens 1 and say how it went.

    `full` is False when the run's -t budget left less than --probe-timeout: no answer then proves nothing.
    `query`: a router's (never load a model for it).
    """
    body = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0, "stream": False}
    try:
        resp = request(client, endpoint, "POST", f"/v1/completions{query and '?' + query}", timeout, body=body)
    except FetchError as err:
        # nothing listens: down; unreachable from here (DNS, TLS) right after /metrics answered: proves nothing
        # a request this host could not send, or a peer that does not speak HTTP: proves nothing either
        kind = {"down": REFUSED, "unreachable": REJECTED, "client": REJECTED, "not http": REJECTED}.get(
            err.kind, NO_ANSWER if full else CUT_SHORT)
        return ProbeOutcome(kind, timeout, err.detail)
    if resp.status != 200:
        said = endpoint.redact(_error_text(resp.json()))
        held = answers.holding(resp.status, resp.text())  # its own word that it holds itself (scaling)
        if held is not None or (resp.status == 503 and _turned_away(resp.json())):
            said = f" {held.detail.removeprefix('HTTP 503 ')}" if held is not None else clean(said, 160)
            return ProbeOutcome(ENGINE_PAUSED, resp.seconds, f"completion answered HTTP 503{said}", status=503)
        detail = f"completion answered HTTP {resp.status}{clean(said, 160)}"
        if resp.status >= 500 and any(sign in said for sign in ENGINE_DEAD_SIGNS):
            return ProbeOutcome(ENGINE_DEAD, resp.seconds, detail)
        return ProbeOutcome(REJECTED if 400 <= resp.status < 500 else NO_ANSWER, resp.seconds, detail,
                            status=resp.status)
    doc = resp.json()
    if not isinstance(doc, dict) or not doc.get("choices"):  # an answer all the same: it proves nothing
        said = endpoint.redact(_error_text(doc))
        kind = clean(resp.content_type.split(";")[0].strip() or "no content type", 60)
        return ProbeOutcome(REJECTED, resp.seconds, f"HTTP 200 but no completion ({kind}{clean(said, 160)})")
    usage = doc.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return ProbeOutcome(ANSWERED, resp.seconds, prompt_tokens=_count(usage.get("prompt_tokens"), 16.0),
                        completion_tokens=_count(usage.get("completion_tokens"), 1.0))


def _turned_away(doc: object) -> bool:
    """vLLM's own error for a request turned away while paused (PAUSED_TYPE, PAUSED_MESSAGE), nothing else."""
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict):
        return False
    msg = err.get("message")
    return err.get("type") == PAUSED_TYPE and isinstance(msg, str) and msg.startswith(PAUSED_MESSAGE)


def _count(value: object, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and 0 <= value < 1e6 else default


def _error_text(doc: object) -> str:
    if isinstance(doc, dict):
        err = doc.get("error")
        msg = err.get("message") if isinstance(err, dict) else doc.get("message")
        if isinstance(msg, str) and msg:
            return f": {msg[:400]}"
    return ""
