"""The only two requests the check makes beyond /metrics: list the models, and a 1-token probe.

The probe is a real completion, so it takes a request slot: it is sent only to an idle engine.
"""

from __future__ import annotations

import httpx

from .fetch import Endpoint, FetchError, request
from .verdict import Probe

PROBE_PROMPT = "Hi"


def first_model(client: httpx.Client, endpoint: Endpoint, timeout: float) -> str | None:
    """The first model id /v1/models lists. Raises FetchError when the endpoint does not answer."""
    resp = request(client, endpoint, "GET", "/v1/models", timeout, auth=True)
    if resp.status != 200:
        raise FetchError("status", f"/v1/models answered HTTP {resp.status}", resp.status)
    doc = resp.json()
    try:
        model = doc["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        raise FetchError("protocol", "/v1/models did not list any model") from None
    return str(model)[:200] if isinstance(model, (str, int)) else None


def complete(client: httpx.Client, endpoint: Endpoint, model: str, timeout: float) -> Probe:
    """Send one completion of max_tokens 1 and say how it went. Never raises."""
    body = {"model": model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0, "stream": False}
    try:
        resp = request(client, endpoint, "POST", "/v1/completions", timeout, body=body, auth=True)
    except FetchError as err:
        return Probe(ok=False, seconds=timeout, detail=err.detail, refused=err.kind == "down")
    if resp.status != 200:
        return Probe(ok=False, seconds=resp.seconds, status=resp.status,
                     detail=f"completion answered HTTP {resp.status}{endpoint.redact(_error_text(resp.json()))}")
    doc = resp.json()
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not doc.get("choices"):
        return Probe(ok=False, seconds=resp.seconds, status=resp.status, detail="completion answer has no choices")
    usage = usage if isinstance(usage, dict) else {}
    return Probe(
        ok=True, seconds=resp.seconds,
        prompt_tokens=_count(usage.get("prompt_tokens"), 16.0),
        completion_tokens=_count(usage.get("completion_tokens"), 1.0),
    )


def _count(value: object, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and 0 <= value < 1e6 else default


def _error_text(doc: object) -> str:
    if isinstance(doc, dict):
        err = doc.get("error")
        msg = err.get("message") if isinstance(err, dict) else doc.get("message")
        if isinstance(msg, str) and msg:
            return f": {msg[:120]}"
    return ""
