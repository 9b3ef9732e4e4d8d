"""The fleet restart budget's one question, asked only once the handler would restart: to Prometheus (its HTTP
API, GET /api/v1/query) or to the Icinga 2 API on the master (the servicegroup's services, one object query).
The project's one HTTP client (check_vllm.server.fetch), a small body, a short time-out. Whatever fails is "the
fleet was not asked", and the operator's --fleet-unasked decides (check_vllm.restart.fleet).
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from check_vllm.restart import fleet
from check_vllm.restart.fleet import Budget, queries, rule, scalar, unasked
from check_vllm.restart.policy import Decision
from check_vllm.server.fetch import Endpoint, request
from check_vllm.server.fetch_errors import FetchError

#: An instant query's answer of one number is ~100 bytes; an error page more.
MAX_BYTES = 64 << 10
#: A service's last check result is ~2 KiB (its command line, perfdata, output): a few hundred services.
ICINGA_MAX_BYTES = 1 << 20


def consult(budget: Budget, restart: Decision) -> Decision:
    """`restart` (a decision to act) kept or held on what the fleet's source says of the budget's group now."""
    if budget.source == fleet.ICINGA:
        return _icinga(budget, restart)
    return _prometheus(budget, restart)


def _prometheus(budget: Budget, restart: Decision) -> Decision:
    deadline = time.monotonic() + budget.timeout
    endpoint = Endpoint(budget.url, ca_data=budget.ca_data, connect_timeout=budget.timeout, max_bytes=MAX_BYTES)
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


def _icinga(budget: Budget, restart: Decision) -> Decision:
    """The servicegroup's services in one object query, the ApiUser's login as HTTP basic auth (a header, never
    the URL); a redirect to another origin drops it (httpx)."""
    endpoint = Endpoint(budget.url, ca_data=budget.ca_data, connect_timeout=budget.timeout,
                        max_bytes=ICINGA_MAX_BYTES)
    try:
        with endpoint.client() as client:
            if budget.login is not None:
                client.auth = (budget.login.user, budget.login.password)
            client.headers.update(fleet.ICINGA_HEADERS)
            answer = request(client, endpoint, "POST", fleet.ICINGA_PATH, budget.timeout,
                             body=fleet.icinga_question(budget.group))
    except FetchError as err:
        return unasked(budget, _secret_free(budget, f"{budget.asked}: {err.detail}"), restart)
    if answer.status != 200:
        return unasked(budget, _secret_free(budget, fleet.icinga_refusal(answer.status, answer.json())), restart)
    counted = fleet.icinga_counts(answer.json())
    if counted is None:
        return unasked(budget, f"{budget.asked} gave no object query answer (not its JSON)", restart)
    size, busy = counted
    if size == 0:
        return unasked(budget, f"{budget.asked} knows no service of servicegroup {budget.group}", restart)
    return rule(budget, busy, size, restart)


def _secret_free(budget: Budget, text: str) -> str:
    """Text from the other side with the password blanked out, should it ever echo it."""
    return text.replace(budget.login.password, "***") if budget.login is not None else text
