"""The check's command line as an orchestrator's probe (`check_vllm --probe KIND`, issue 28): its options, the agent
asked first (--agent), and the answer, a failing liveness asking the fleet restart budget first (issue 55: its fail
is a restart). The answer itself is check_vllm.probes'; the budget is the handler's (check_vllm.restart.fleet_options,
check_vllm.restart.fleet_probe), defined once for both.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from check_vllm.cli.args import UsageError, number
from check_vllm.probes.answers import AGENT_OPTION, FAIL, KINDS, LIVENESS, OPTION, REUSE_MAX, REUSE_OPTION

if TYPE_CHECKING:
    from check_vllm.probes.answers import Answer


def add_options(p: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> None:
    """The probe's block of the check's --help (check_vllm.probes.exec_probe, check_vllm.probes.answers), and the
    fleet restart budget liveness keeps, unless `argv` (the command line about to be parsed) neither names one of
    its options nor asks for help: its definitions (check_vllm.restart.fleet) bring dataclasses and inspect,
    ~10 ms of a reused verdict's run, which imports neither."""
    o = p.add_argument_group("orchestrator probe (docs/probes.md)")
    o.add_argument(OPTION, choices=KINDS, help="answer as a Kubernetes exec probe or Docker HEALTHCHECK: exit 0 "
                   "pass, 1 fail, one line; liveness fails only on proof, readiness from the first sign, startup "
                   "until it served; a fault of the check itself never fails liveness or readiness")
    o.add_argument(AGENT_OPTION, metavar="HOST:PORT", help="with --probe: ask the check_vllm_agent --probe-listen "
                   "at HOST:PORT first (one loopback request, no judgement here); when it gives no answer, judge "
                   "this run as without it and say so")
    o.add_argument(REUSE_OPTION, type=number(float), default=0.0, metavar="S",
                   help="with --probe liveness or readiness: pass on a passing verdict another run saved at most S "
                        f"seconds ago, without reading the server (so the two share one reading a period); a fail "
                        f"is always read afresh; 0 to {REUSE_MAX:g} (default: %(default)g: every probe reads)")
    if argv is not None and not any(map(_may_name_fleet, argv)):
        return
    from check_vllm.restart import fleet_options

    fleet_options.add(p.add_argument_group(fleet_options.PROBE_TITLE), fleet_options.PROBE_ASKS)


def _may_name_fleet(arg: str) -> bool:
    """An argument argparse may read as a --fleet-* option (abbreviated too) or as help (-h in a bundle, --h...);
    a value that merely looks so only costs the import."""
    return arg.startswith(("--f", "--h")) or (arg.startswith("-") and not arg.startswith("--") and "h" in arg)


def validate(args: argparse.Namespace) -> None:
    """The probe's numbers: the reuse window, and a liveness probe's -t holding its question to the fleet."""
    if not 0 <= args.reuse_verdict <= REUSE_MAX:
        raise UsageError(f"{REUSE_OPTION} must be from 0 to {REUSE_MAX:g} seconds")
    if keeps(args) and args.timeout < args.fleet_timeout + 2:
        raise UsageError(f"--timeout {args.timeout:g} must be at least --fleet-timeout {args.fleet_timeout:g} + 2 "
                         "seconds: liveness keeps --fleet-timeout of it to ask the fleet")


def keeps(args: argparse.Namespace) -> float:
    """The seconds of -t a liveness probe under a fleet restart budget keeps for its question (the run's
    deadline comes that much sooner), else 0."""
    return args.fleet_timeout if args.probe == LIVENESS and getattr(args, "fleet_prometheus", None) else 0.0


def agent_first(kind: str, agent: str) -> tuple[str | None, str]:
    """--agent: its answer printed and the process ended, unless it gives none (then "why" for this run's line)
    or it fails liveness (then its line: a restart, which a fleet budget, when given, holds or keeps)."""
    from check_vllm.probes import ask

    asked = ask.ask(kind, agent)
    if asked.code == FAIL and kind == LIVENESS:
        return asked.line, ""
    if asked.code is not None:
        print(asked.line)
        sys.exit(asked.code)
    return None, f"agent {agent} gave no answer ({asked.line}): judged by this run"


def answer(args: argparse.Namespace, failed: str | None, run: Callable[[], Any], held: Any, ends: float,
           doing: Callable[[str], None]) -> Answer:
    """The probe's answer to this run (or to the agent's liveness fail, `failed`); a failing liveness asks the
    fleet restart budget first when one is given (check_vllm.restart.fleet_probe), by `ends`, when -t ends."""
    from check_vllm.probes.answers import Answer
    from check_vllm.probes.exec_probe import answer_run
    from check_vllm.restart.fleet_options import budget_of

    # half of one is a usage error for every kind (the three share their options); none added, none was given
    budget = budget_of(args) if hasattr(args, "fleet_prometheus") else None
    if failed is None:
        reply = answer_run(args.probe, run(), held)
    else:
        reply = Answer(args.probe, False, failed.split(": ", 1)[-1])
    if budget is None or not keeps(args):
        return reply
    from check_vllm.restart.fleet_probe import kept

    doing("Prometheus (the fleet restart budget)")
    return kept(reply, budget, ends)
