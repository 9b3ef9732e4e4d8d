"""The fleet restart budget's one question to Prometheus (its HTTP API, GET /api/v1/query), asked only once the
handler would restart: the project's one HTTP client (check_vllm.server.fetch), a small body, a short time-out.
Whatever fails is "the fleet was not asked", and the operator's --fleet-unasked decides (check_vllm.restart.fleet).
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from check_vllm.restart.fleet import Budget, queries, rule, scalar, unasked
from check_vllm.restart.policy import Decision
from check_vllm.server.fetch import Endpoint, request
from check_vllm.server.fetch_errors import FetchError

#: An instant query's answer of one number is ~100 bytes; an error page more.
MAX_BYTES = 64 << 10


def consult(budget: Budget, restart: Decision) -> Decision:
    """`restart` (a decision to act) kept or held on what Prometheus says of the budget's group now."""
    deadline = time.monotonic() + budget.timeout
    endpoint = Endpoint(budget.prometheus, connect_timeout=budget.timeout, max_bytes=MAX_BYTES)
    counts = []
    try:
        with endpoint.client() as client:
            for expr in queries(budget.group):
                left = deadline - time.monotonic()
                if left <= 0:
                    return unasked(budget, f"Prometheus took more than {budget.timeout:g} s", restart)
                answer = request(client, endpoint, "GET", "/api/v1/query?" + urlencode({"query": expr}), left)
                if answer.status != 200:
                    return unasked(budget, f"Prometheus answered HTTP {answer.status} to {expr}", restart)
                number = scalar(answer.json())
                if number is None:
                    return unasked(budget, f"Prometheus gave no number for {expr}", restart)
                counts.append(number)
    except FetchError as err:
        return unasked(budget, f"Prometheus at {endpoint.shown}: {err.detail}", restart)
    size, busy = counts
    if size == 0:
        return unasked(budget, f"Prometheus knows no server of group {budget.group}", restart)
    return rule(budget, busy, size, restart)
