"""What a server's answer to GET /metrics says when it is no page: its metrics are off (404, llama.cpp's 501, the
flag to add named), it is a router asking which model (check_vllm.server.router), it holds itself on purpose (vLLM's
elastic expert-parallel scaling: every path but its observability list answers 503 with a body that says why), or
it did not serve (any other 5xx). Pure: an answer in, the Failure it is out, with whether another URL might do
better (the restricted page's fallback).
"""

from __future__ import annotations

import json

from check_vllm.contract.engines import ENGINES, Engine
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import Failure
from check_vllm.contract.vocab import NO_METRICS, UNRESPONSIVE

#: What a server answers a route it has but does not serve as configured (llama.cpp's /metrics without --metrics).
NOT_IMPLEMENTED = 501
#: How much of a body is looked at for a server's own words.
_LOOKED = 2000


#: What an engine that guards /metrics with its API key answers without the right one (llama-server --api-key:
#: 401 "Invalid API Key"; a proxy's auth: 401 or 403).
KEY_ASKED = (401, 403)


def not_a_page(status: int, body: str, named: Engine | None, keyed: bool = False) -> tuple[Failure, bool] | None:
    """The Failure an answer other than 200 is, and whether another URL might do better; None for a 200.
    `keyed`: the request carried an API key (a 401 then says it was refused, else that one is needed)."""
    if status == 200:
        return None
    if status in KEY_ASKED:  # the server guards its page: never "metrics off"
        why = "the API key was refused" if keyed else "the server needs an API key (--api-key-file)"
        return Failure(NO_METRICS, f"/metrics answered HTTP {status}: {why}", status=status), False
    held = holding(status, body)
    if held is not None:
        return held, False
    if status >= 500 and status != NOT_IMPLEMENTED:
        return Failure(UNRESPONSIVE, f"/metrics answered HTTP {status}", status=status), True
    router = next((row for row in ENGINES if row.routes.router.unnamed  # it asks which model: read per model
                   and row.routes.router.unnamed in body[:_LOOKED]), None)
    if router is not None:
        return Failure(NO_METRICS, f"/metrics answered HTTP {status}: {router.routes.router.unnamed} "
                       f"({router.name}'s router)", engine=router.key), False
    said = next((row for row in ENGINES if row.metrics_flag and f"`{row.metrics_flag}`" in body[:_LOOKED]), None)
    row = said or named  # 404, or llama.cpp's 501 ("Start it with `--metrics`"): the server answers, metrics off
    off = f" ({row.name} serves it only with {row.metrics_flag})" if row and row.metrics_flag else ""
    return Failure(NO_METRICS, f"/metrics answered HTTP {status}{off}", engine=said.key if said else None), True


def holding(status: int, body: str) -> Failure | None:
    """A 503 whose body is an engine's own word that it holds itself on purpose (Engine.holding): that word's
    Failure, the server's sentence quoted; None for any other answer."""
    if status != 503:
        return None
    try:
        doc = json.loads(body[:_LOOKED])
    except ValueError:
        return None
    said = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(said, str):
        return None
    for row in ENGINES:
        for sign, word in row.holding:
            if sign in said:
                return Failure(word, f"HTTP 503 \"{clean(said, 160)}\" ({row.name})", status=status)
    return None
