"""A mark of an engine's slots' progress, for a page that prints its counters too coarsely to show a stall
(llama.cpp's 6 significant digits): GET /slots lists each slot's task and its exact token counts, so any step
changes the mark. Asked only with work present (a busy server is not about to sleep: a /slots task would reset
its idle timer), never raises: None when the server does not say (--no-slots, an error, a time-out).
"""

from __future__ import annotations

import zlib

import httpx

from check_vllm.server.fetch import Endpoint, request
from check_vllm.server.fetch_errors import FetchError

#: The numbers of a slot that move with its work: which task it runs, what it decoded and prompted so far.
_MOVING = ("id", "id_task", "is_processing", "n_prompt_tokens_processed")


def mark(client: httpx.Client, endpoint: Endpoint, route: str, timeout: float) -> float | None:
    """A number that changes whenever any slot makes a step (a CRC of what moves), or None."""
    try:
        resp = request(client, endpoint, "GET", route, timeout)
    except FetchError:
        return None
    doc = resp.json() if resp.status == 200 else None
    if not isinstance(doc, list) or not doc:
        return None
    seen = []
    for slot in doc:
        if not isinstance(slot, dict):
            return None
        nexts = slot.get("next_token")
        decoded = nexts[0].get("n_decoded") if isinstance(nexts, list) and nexts and isinstance(nexts[0], dict) \
            else None
        seen.append(tuple(slot.get(k) for k in _MOVING) + (decoded,))
    return float(zlib.crc32(repr(sorted(seen, key=repr)).encode()))
