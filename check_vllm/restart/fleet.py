"""The fleet restart budget (issue 55), pure: how many servers of a group may be proven stuck or starting at once
before a restart is held for a person, the PromQL that counts them, and what Prometheus's answer says.

A cause outside the servers (a hung model store, a partition, a bad rollout) stalls many at once; each handler
proves its own server stuck alone, and every restart reloads weights from the same overloaded store. Above the
budget the handler does not restart: the alert stays, a person decides. The count is what the fleet's own
Prometheus holds of the agents' series (check_vllm.haproxy.exposition), under the label the operator sets on
their scrape targets: never a store of ours. Asking it is check_vllm.restart.fleet_ask.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, NamedTuple

from check_vllm.restart.policy import Decision

#: Seconds the handler waits for Prometheus: the restart it may hold is waiting too.
TIMEOUT = 3.0
#: The scrape-target label that names a server's group (docs/fleet.md).
LABEL = "group"
#: What the handler does when the fleet cannot be asked: restart (as without a budget) or hold.
UNASKED = ("restart", "hold")
#: A group name the query can carry as it is: no quoting to get wrong.
GROUP_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,100}")


class Limit(NamedTuple):
    """At most `servers` servers, or at most `share` (0-1] of the group's; one of them is set."""

    servers: int | None = None
    share: float | None = None

    def of(self, size: int) -> int:
        """The most servers of a group of `size` that may be proven stuck or starting at once: never below 1,
        or a small group's share would hold every restart."""
        if self.servers is not None:
            return self.servers
        return max(1, math.floor((self.share or 0.0) * size + 1e-9))

    def __str__(self) -> str:
        return str(self.servers) if self.servers is not None else f"{(self.share or 0.0) * 100:g}%"


class Budget(NamedTuple):
    """What --fleet-* say: where to ask, which group, its limit, what to do when nobody answers."""

    prometheus: str
    group: str
    limit: Limit
    unasked: str = UNASKED[0]
    timeout: float = TIMEOUT


def limit(text: str) -> Limit:
    """--fleet-max: a count (2) or a share of the group (25%): an argparse type."""
    text = text.strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if math.isfinite(share) and 0 < share <= 100:
                return Limit(share=share / 100)
        elif int(text) >= 1:
            return Limit(servers=int(text))
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"a count of servers (1, 2, ...) or a share of the group (1%-100%), not {text!r}")


def group(text: str) -> str:
    """--fleet-group: the value of the scrape targets' `group` label: an argparse type."""
    if not GROUP_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"letters, digits and _ . : / - only (at most 100), not {text!r}")
    return text


def queries(name: str) -> tuple[str, str]:
    """The group's size (its agents, one per server) and its servers proven stuck or starting now (one per
    agent, whatever its engines or models)."""
    sel = f'{LABEL}="{name}"'
    size = f"count(check_vllm_agent_up{{{sel}}})"
    busy = (f'count(max by (instance, server) (check_vllm_restartable{{{sel}}} == 1 or '
            f'check_vllm_verdict{{{sel},word="starting"}} == 1)) or vector(0)')
    return size, busy


def scalar(doc: Any) -> int | None:
    """The one number of an instant query's answer (/api/v1/query, resultType vector), or None: no data, an
    error, or not that shape."""
    if not isinstance(doc, dict) or doc.get("status") != "success":
        return None
    data = doc.get("data")
    result = data.get("result") if isinstance(data, dict) and data.get("resultType") == "vector" else None
    if not isinstance(result, list) or len(result) != 1 or not isinstance(result[0], dict):
        return None
    value = result[0].get("value")
    try:
        number = float(value[1]) if isinstance(value, list) and len(value) == 2 else math.nan
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 0 and number == int(number) else None


def rule(budget: Budget, busy: int, size: int, restart: Decision) -> Decision:
    """`restart` (a decision to act) held or kept on the group's count. This server is proven stuck, so it counts
    as one even before Prometheus has scraped it."""
    busy = max(busy, 1)
    most = budget.limit.of(size)
    share = f", {budget.limit} of {size}" if budget.limit.share is not None else ""
    said = (f"fleet budget: {busy} of {size} servers of group {budget.group} are proven stuck or starting "
            f"(at most {most} at once{share})")
    if busy > most:
        return Decision(False, f"{restart.why}, but {said}: not restarting, a person decides", "refuse")
    return Decision(True, f"{restart.why}; {said}", restart.kind)


def unasked(budget: Budget, why: str, restart: Decision) -> Decision:
    """`restart` when the fleet cannot be asked: the operator's --fleet-unasked, the line saying so either way."""
    said = f"the fleet was not asked ({why})"
    if budget.unasked == "hold":
        return Decision(False, f"{restart.why}, but {said}: holding (--fleet-unasked hold), a person decides",
                        "refuse")
    return Decision(True, f"{restart.why}; {said}: restarting (--fleet-unasked restart)", restart.kind)
