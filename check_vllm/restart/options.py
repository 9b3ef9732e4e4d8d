"""check_vllm_restart's command line: the event the scheduler reports, the target, the guards."""

from __future__ import annotations

import argparse

from check_vllm import __version__
from check_vllm.cli import option_table
from check_vllm.cli.args import Parser, UsageError, check_url, number
from check_vllm.cli.option_table import HANDLER
from check_vllm.contract.defaults import LOCK_TIMEOUT
from check_vllm.contract.vocab import CODE_NAMES
from check_vllm.restart import fleet, post_mortem
from check_vllm.restart.policy import Event, Policy

PROG = HANDLER
#: Seconds before a restart command that has not finished is killed.
COMMAND_TIMEOUT = 600.0
DEFAULT = Policy()

#: $SERVICESTATE$ as a name or as the plugin exit code it stands for.
_STATES = {**{str(code): name for code, name in enumerate(CODE_NAMES)}, **{name: name for name in CODE_NAMES}}
_TYPES = {"0": "SOFT", "1": "HARD", "SOFT": "SOFT", "HARD": "HARD"}


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        usage=f"{PROG} --state STATE --state-type TYPE [--attempt N] --url URL [options] -- COMMAND [ARG ...]",
        description="Restart an LLM server (vLLM, llama.cpp, SGLang), only when check_vllm's own state proves it stuck or down. "
                    "Call it as the event handler of the service that runs check_vllm.",
        epilog="It restarts only for a CRITICAL HARD state whose check_vllm verdict (read from the state file) is "
               "stuck, down or unresponsive, fresh, and newer than the last restart; never within the cooldown, "
               "never beyond --max-per-hour. The command after -- runs without a shell. Exit codes: 0 decided "
               "(whether or not it restarted), 1 the restart command failed or timed out, 2 bad usage.",
    )
    e = p.add_argument_group("event (from the scheduler)")
    e.add_argument("--state", help="$service.state$ / $SERVICESTATE$: OK, WARNING, CRITICAL, UNKNOWN; with --status, "
                                   "the main service's (a restart waits for it to be CRITICAL; empty or unset: "
                                   "CRITICAL)")
    e.add_argument("--state-type", metavar="TYPE", help="$service.state_type$ / $SERVICESTATETYPE$: SOFT or HARD; "
                                                        "with --status, the main service's (a restart waits for "
                                                        "HARD; empty or unset: HARD)")
    e.add_argument("--attempt", type=number(int, 1), metavar="N", help="$service.check_attempt$ / $SERVICEATTEMPT$ (logged)")
    e.add_argument("--service-downtime", type=_depth, action="append", metavar="N",
                   help="$service.downtime_depth$ / $SERVICEDOWNTIME$: above 0, no restart; give it twice for the "
                        "restart service (its own and the main service's, $SERVICEDOWNTIME::vllm$): either holds")
    e.add_argument("--host-downtime", type=_depth, default=0, metavar="N",
                   help="$host.downtime_depth$ / $HOSTDOWNTIME$: above 0, no restart")
    e.add_argument("--acknowledged", type=_depth, default=0, metavar="N",
                   help="$service.acknowledgement$ (Icinga 2): above 0 an operator has the problem, no restart")
    t = p.add_argument_group("target (the same as the check's)")
    option_table.add(t, HANDLER, option_table.SERVER, required=("--url",))
    option_table.add(t, HANDLER, option_table.STATE)
    option_table.add(p.add_argument_group(option_table.PROCESS_TITLE), HANDLER, option_table.PROCESS)
    g = p.add_argument_group("guards")
    g.add_argument("--cooldown", type=number(float, 0), default=DEFAULT.cooldown, metavar="S",
                   help="no restart within S seconds of the last one: time to load the model (default %(default)g)")
    g.add_argument("--max-per-hour", type=number(int, 1), default=DEFAULT.max_per_hour, metavar="N",
                   help="circuit breaker: no more than N restarts in any hour (default %(default)s)")
    g.add_argument("--max-verdict-age", type=number(float, 1), default=DEFAULT.max_verdict_age, metavar="S",
                   help="ignore a verdict older than S seconds, about twice the check interval (default %(default)g)")
    m = p.add_argument_group("post-mortem (taken once it decided to restart, before the command; docs/handler.md)")
    m.add_argument("--no-post-mortem", action="store_true", help="restart without taking one")
    m.add_argument("--post-mortem-dir", metavar="DIR", help=f"where the bundles go, one directory each (default: "
                   f"{post_mortem.SUBDIR}/ in the state directory)")
    m.add_argument("--post-mortem-budget", type=number(float, 1), default=post_mortem.BUDGET, metavar="S",
                   help="the restart follows within S seconds whatever the collection does (default %(default)g)")
    m.add_argument("--post-mortem-keep", type=number(int, 1), default=post_mortem.KEEP, metavar="N",
                   help="keep the last N bundles (default %(default)s)")
    m.add_argument("--post-mortem-max-mb", type=number(int, 1), default=post_mortem.MAX_MB, metavar="MB",
                   help="and at most MB megabytes of them, the newest always kept (default %(default)s)")
    m.add_argument("--take-post-mortem", action="store_true", help="take one now, without restarting, if the "
                   "check's last verdict is a fresh, proven hang (stuck, down or unresponsive at CRITICAL), else "
                   "nothing; exit 0 either way: a Kubernetes preStop hook, the Docker restarter (docs/handler.md)")
    m.add_argument("--post-mortems", action="store_true", help="list the bundles kept in the post-mortem directory "
                   "(oldest first: when, size, what each holds) and exit (no --state, no command needed)")
    f = p.add_argument_group("fleet restart budget (on with --fleet-prometheus and --fleet-group; docs/fleet.md)")
    f.add_argument("--fleet-prometheus", metavar="URL", help="the Prometheus that scrapes the group's "
                   "check_vllm_agent --metrics-listen, asked (GET URL/api/v1/query) only once a restart is decided")
    f.add_argument("--fleet-group", type=fleet.group, metavar="NAME", help=f"this server's group: the value of the "
                   f"{fleet.LABEL!r} label on its agent's scrape target")
    f.add_argument("--fleet-max", type=fleet.limit, metavar="N|P%", help="no restart while more than N servers of "
                   "the group (or P%% of it, at least 1) are proven stuck or starting, this one included: a person "
                   "decides")
    f.add_argument("--fleet-unasked", choices=fleet.UNASKED, default=fleet.UNASKED[0], help="when Prometheus cannot "
                   "be asked: restart as without a budget, or hold (default %(default)s); the line says so either way")
    f.add_argument("--fleet-timeout", type=number(float, 0.1), default=fleet.TIMEOUT, metavar="S",
                   help="wait at most S seconds for Prometheus (default %(default)g)")
    r = p.add_argument_group("run")
    r.add_argument("--command-timeout", type=number(float, 1), default=COMMAND_TIMEOUT, metavar="S",
                   help="kill the restart command after S seconds (default %(default)g)")
    r.add_argument("--lock-timeout", type=number(float, 0), default=LOCK_TIMEOUT, metavar="S",
                   help="wait this long for a concurrent call to finish deciding (default %(default)g)")
    r.add_argument("--log", metavar="FILE", help="also append each decision line to FILE")
    r.add_argument("--dry-run", action="store_true", help="decide and log, but do not run the command")
    r.add_argument("--status", action="store_true",
                   help="act as a check instead: CRITICAL when a restart is due now, WARNING while a guard holds "
                        "one back, OK otherwise; restarts nothing (no --state, no command needed)")
    r.add_argument("-V", "--version", action="version", version=f"{PROG} {__version__}")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, Event, list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    else:
        command = []
    args = parser().parse_args(argv)
    _check_fleet(args)
    if args.post_mortems or args.take_post_mortem:  # no event, no command
        check_url(args.url)
        return args, _event(args, "OK", "HARD"), command
    if args.status:  # the restart service's check: the main service's state and state type, CRITICAL HARD unset
        check_url(args.url)
        main = (args.state or "").strip()
        state = _STATES.get(main.upper()) if main else "CRITICAL"
        if state is None:
            raise UsageError(f"--state must be OK, WARNING, CRITICAL or UNKNOWN (or 0-3), not {args.state!r}")
        return args, _event(args, state, _state_type((args.state_type or "").strip() or "HARD")), command
    if args.state is None or args.state_type is None:
        raise UsageError("--state and --state-type are required (or --status)")
    state = _STATES.get(args.state.strip().upper())
    if state is None:
        raise UsageError(f"--state must be OK, WARNING, CRITICAL or UNKNOWN (or 0-3), not {args.state!r}")
    state_type = _state_type(args.state_type)
    check_url(args.url)
    if not command or not command[0]:
        raise UsageError("no restart command: give it after --, e.g. -- sudo systemctl restart vllm")
    return args, _event(args, state, state_type), command


def _check_fleet(args: argparse.Namespace) -> None:
    """The budget is on with both its URL and its group, and then needs its limit; half of it is a usage error,
    never a budget silently off."""
    given = [o for o, v in (("--fleet-prometheus", args.fleet_prometheus), ("--fleet-group", args.fleet_group),
                            ("--fleet-max", args.fleet_max)) if v is not None]
    if given and len(given) < 3:
        raise UsageError(f"the fleet restart budget needs --fleet-prometheus, --fleet-group and --fleet-max "
                         f"together (given: {', '.join(given)})")
    if args.fleet_prometheus is not None:
        check_url(args.fleet_prometheus, "--fleet-prometheus")


def _state_type(text: str) -> str:
    """SOFT or HARD from the scheduler's word or number (0/1)."""
    state_type = _TYPES.get(text.strip().upper())
    if state_type is None:
        raise UsageError(f"--state-type must be SOFT or HARD (or 0/1), not {text!r}")
    return state_type


def _event(args: argparse.Namespace, state: str, state_type: str) -> Event:
    return Event(state, state_type, args.attempt, sum(args.service_downtime or ()), args.host_downtime,
                 args.acknowledged > 0)


def _depth(text: str) -> int:
    """A downtime depth or acknowledgement as the scheduler gives it; an unset macro ("") is 0."""
    text = text.strip()
    if not text:
        return 0
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a count (0, 1, ...), not {text!r}")
    return int(text)
