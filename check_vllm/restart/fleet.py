"""The fleet restart budget (issue 55), pure: how many servers of a group may be proven stuck or starting at once
before a restart is held for a person, the PromQL that counts them and what Prometheus's answer says, or the Icinga 2
object query that lists a servicegroup's services and what their last status lines say.

A cause outside the servers (a hung model store, a partition, a bad rollout) stalls many at once; each handler
proves its own server stuck alone, and every restart reloads weights from the same overloaded store. Above the
budget the handler does not restart: the alert stays, a person decides. The count is what the fleet's own
Prometheus holds of the agents' series (check_vllm.haproxy.exposition), under the label the operator sets on
their scrape targets, or what the Icinga 2 master holds of a servicegroup's check_vllm services: never a store
of ours. Asking either is check_vllm.restart.fleet_ask.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, NamedTuple

from check_vllm.contract.engines import ENGINES
from check_vllm.contract.safe_text import clean, without_userinfo
from check_vllm.contract.vocab import BY_WORD, CODE_NAMES, CRITICAL, STARTING, WARNING, WORDS
from check_vllm.restart.policy import Decision

#: Where the count is asked: the Prometheus HTTP API, or the Icinga 2 API on the master.
PROMETHEUS, ICINGA = "prometheus", "icinga"
#: Seconds the handler waits for the fleet's source: the restart it may hold is waiting too.
TIMEOUT = 3.0
#: The scrape-target label that names a server's group (docs/fleet.md).
LABEL = "group"
#: What the handler does when the fleet cannot be asked: restart (as without a budget) or hold.
UNASKED = ("restart", "hold")
#: A group name the query can carry as it is: no quoting to get wrong.
GROUP_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,100}")


class Login(NamedTuple):
    """An Icinga ApiUser's name and password: never shown, its repr included (a traceback, a debug print)."""

    user: str
    password: str

    def __repr__(self) -> str:
        return "Login(***)"

    def __str__(self) -> str:
        return "Login(***)"


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

    url: str
    group: str
    limit: Limit
    unasked: str = UNASKED[0]
    timeout: float = TIMEOUT
    source: str = PROMETHEUS
    #: The Icinga ApiUser's (--fleet-icinga-user-file, read at start); None for Prometheus.
    login: Login | None = None
    #: The source's CA bundle (--fleet-ca-file), PEM text as it was checked.
    ca_data: str | None = None

    @property
    def asked(self) -> str:
        """The source as a line names it: never with user:password."""
        name = "Icinga 2" if self.source == ICINGA else "Prometheus"
        return f"{name} at {without_userinfo(self.url)}"

    @property
    def members(self) -> str:
        """The group as the line names it; an Icinga 2 count says whose it is."""
        if self.source == ICINGA:
            return f"servicegroup {self.group} in {self.asked}"
        return f"group {self.group}"


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
    """--fleet-group: the value of the scrape targets' `group` label, or an Icinga 2 servicegroup's name: an
    argparse type."""
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


# --------------------------------------------------------------------------- the Icinga 2 API's answer
# The group is a servicegroup on the master, its members the check_vllm services; each says what its last check's
# status line says, which the check wrote (`<ENGINE> CRITICAL - <word>`, `<ENGINE> WARNING - starting`). The words,
# which are restartable and the engines' labels are the contract's: nothing here restates them.

#: The object query (POST with X-HTTP-Method-Override: GET: Icinga 2 takes filter_vars only in a body, the
#: group bound as a variable, never quoted into the filter).
ICINGA_PATH = "/v1/objects/services"
ICINGA_FILTER = "group in service.groups"
ICINGA_ATTRS = ("state", "state_type", "last_check_result")
ICINGA_HEADERS = {"Accept": "application/json", "X-HTTP-Method-Override": "GET"}
#: The check's own first words: an engine's label, the state, " - ", a verdict word (longest first: "no metrics").
STATUS_LINE = re.compile(
    "({}) ({}) - ({})(?![\\w-])".format(
        "|".join(re.escape(e.label) for e in ENGINES), "|".join(CODE_NAMES),
        "|".join(re.escape(w) for w in sorted(WORDS, key=len, reverse=True))))


def login(text: str) -> Login | None:
    """The first line of a user file, `user:password` (a UTF-8 BOM and the white space around it dropped), or
    None: no colon, an empty user or password."""
    user, colon, password = text.removeprefix("\ufeff").partition("\n")[0].strip().partition(":")
    return Login(user, password) if colon and user and password else None


def icinga_question(group: str) -> dict[str, Any]:
    """The body of the one query: the group's services, with only what is counted."""
    return {"filter": ICINGA_FILTER, "filter_vars": {"group": group}, "attrs": list(ICINGA_ATTRS)}


def icinga_busy(attrs: dict[str, Any]) -> bool:
    """A service proven stuck or starting: its last status line says so, at the state the service is in."""
    result = attrs.get("last_check_result")
    output = result.get("output") if isinstance(result, dict) else None
    found = STATUS_LINE.match(output) if isinstance(output, str) else None
    if found is None:
        return False  # pending (no check yet), another plugin's line, or not ours
    _, state, word = found.groups()
    if attrs.get("state") != CODE_NAMES.index(state):  # the line and the service disagree: not proof
        return False
    if state == CODE_NAMES[CRITICAL]:
        return BY_WORD[word].restartable
    return state == CODE_NAMES[WARNING] and word == STARTING


def icinga_counts(doc: Any) -> tuple[int, int] | None:
    """(the group's services, those proven stuck or starting) of an object query's answer, or None when it is
    not that answer's shape: a malformed one is never read as a count."""
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        return None
    attrs: list[dict[str, Any]] = [r["attrs"] for r in results
                                   if isinstance(r, dict) and isinstance(r.get("attrs"), dict)]
    if len(attrs) != len(results):
        return None
    return len(attrs), sum(icinga_busy(a) for a in attrs)


def icinga_refusal(status: int, doc: Any) -> str:
    """What an error answer says: the API's own `status` text (cleaned) after the HTTP status, with the usual
    cause of each."""
    said = doc.get("status") if isinstance(doc, dict) else None
    quoted = f": {clean(said, 80)}" if isinstance(said, str) and said.strip() else ""
    if status == 401:
        return f"the Icinga 2 API refused the user (HTTP 401{quoted})"
    if status in (403, 404):  # a missing permission reads "No objects found." (404) in Icinga 2.13
        return (f"the Icinga 2 API answered HTTP {status}{quoted}: does the ApiUser have the permission "
                "objects/query/Service?")
    return f"the Icinga 2 API answered HTTP {status}{quoted}"


# --------------------------------------------------------------------------- the decision

def rule(budget: Budget, busy: int, size: int, restart: Decision) -> Decision:
    """`restart` (a decision to act) held or kept on the group's count. This server is proven stuck, so it counts
    as one even before Prometheus has scraped it."""
    busy = max(busy, 1)
    most = budget.limit.of(size)
    share = f", {budget.limit} of {size}" if budget.limit.share is not None else ""
    said = (f"fleet budget: {busy} of {size} servers of {budget.members} are proven stuck or starting "
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
