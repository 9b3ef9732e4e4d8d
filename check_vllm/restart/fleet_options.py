"""The fleet restart budget's options (--fleet-*), defined once for every front end whose answer is a restart: the
handler (check_vllm_restart, which asks once a restart is decided) and the check's liveness probe (check_vllm
--probe liveness: its fail is the kubelet's or Docker's restart). Their types, default and limits are the pure
budget's (check_vllm.restart.fleet); a front end says only when it asks, and what it asks. Half of a budget is a
usage error, never a budget silently off.
"""

from __future__ import annotations

import argparse
from typing import Any

from check_vllm.cli.args import UsageError, check_url, number
from check_vllm.restart import fleet
from check_vllm.restart.fleet import Budget

#: The options that turn the budget on, together: its URL, its group and its limit.
PROMETHEUS, GROUP, MAX = "--fleet-prometheus", "--fleet-group", "--fleet-max"
#: The other two: what to do unasked, and how long to wait.
UNASKED, TIMEOUT = "--fleet-unasked", "--fleet-timeout"
#: The five, in --help's order.
FLAGS = (PROMETHEUS, GROUP, MAX, UNASKED, TIMEOUT)
#: When the liveness probe asks; its group's title in the check's --help.
PROBE_ASKS = "once liveness would fail (readiness and startup never ask)"
PROBE_TITLE = "fleet restart budget, liveness only (on with --fleet-prometheus and --fleet-group; docs/fleet.md)"


def add(group: Any, asks: str, source: str = "Prometheus", also: str = "") -> None:
    """The five options, added to `group` (a parser's argument group). `asks`: when this front end asks; `source`:
    what --fleet-unasked and --fleet-timeout wait for; `also`: what else --fleet-group may name (a front end with
    another source: the handler's Icinga 2 servicegroup)."""
    group.add_argument(PROMETHEUS, metavar="URL", help="the Prometheus that scrapes the group's check_vllm_agent "
                       f"--metrics-listen, asked (GET URL/api/v1/query) only {asks}")
    group.add_argument(GROUP, type=fleet.group, metavar="NAME", help=f"this server's group: the value of the "
                       f"{fleet.LABEL!r} label on its agent's scrape target{also}")
    group.add_argument(MAX, type=fleet.limit, metavar="N|P%", help="no restart while more than N servers of the "
                       "group (or P%% of it, at least 1) are proven stuck or starting, this one included: a person "
                       "decides")
    group.add_argument(UNASKED, choices=fleet.UNASKED, default=fleet.UNASKED[0], help=f"when {source} cannot be "
                       "asked: restart as without a budget, or hold (default %(default)s); the line says so either way")
    group.add_argument(TIMEOUT, type=number(float, 0.1), default=fleet.TIMEOUT, metavar="S",
                       help=f"wait at most S seconds for {source} (default %(default)g)")


def budget_of(args: argparse.Namespace) -> Budget | None:
    """The Prometheus budget the five options say, None when it is off; a UsageError for half of one or a URL no
    client can use."""
    given = [o for o, v in ((PROMETHEUS, args.fleet_prometheus), (GROUP, args.fleet_group), (MAX, args.fleet_max))
             if v is not None]
    if given and len(given) < 3:
        raise UsageError(f"the fleet restart budget needs {PROMETHEUS}, {GROUP} and {MAX} together (given: "
                         f"{', '.join(given)})")
    if args.fleet_prometheus is None:
        return None
    check_url(args.fleet_prometheus, PROMETHEUS)
    return Budget(args.fleet_prometheus.rstrip("/"), args.fleet_group, args.fleet_max, args.fleet_unasked,
                  args.fleet_timeout)
