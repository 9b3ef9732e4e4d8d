"""check_vllm_restart's command line: the event the scheduler reports, the target, the guards."""

from __future__ import annotations

import argparse
import os

from check_vllm import __version__
from check_vllm.cli import option_table
from check_vllm.cli.args import Parser, UsageError, check_url, number
from check_vllm.cli.connection import KEY_LIMIT, check_ca_file, read_bounded
from check_vllm.cli.option_table import HANDLER
from check_vllm.contract.defaults import LOCK_TIMEOUT
from check_vllm.contract.vocab import CODE_NAMES
from check_vllm.restart import fleet, fleet_options, post_mortem
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
    f = p.add_argument_group("fleet restart budget (on with --fleet-prometheus or --fleet-icinga, and --fleet-group; "
                             "docs/fleet.md)")
    fleet_options.add(f, "once a restart is decided", source="the source",
                      also=", or the Icinga 2 servicegroup of its check_vllm service")
    f.add_argument("--fleet-icinga", metavar="URL", help="or the Icinga 2 API on the master (https://master:5665), "
                   "asked for the servicegroup's services only once a restart is decided")
    f.add_argument("--fleet-icinga-user-file", metavar="FILE", help="a file holding the ApiUser's user:password "
                   "(permission objects/query/Service), read at each run, never shown")
    f.add_argument("--fleet-ca-file", metavar="FILE", help="the CA bundle that signed the source's https "
                   "certificate (the master's CA: /var/lib/icinga2/certs/ca.crt)")
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
    """The budget is on with one source, its group and its limit; half of it is a usage error, never a budget
    silently off. The Icinga 2 login and the CA file are read here, at each run: a bad one is said at once."""
    if args.fleet_prometheus is not None and args.fleet_icinga is not None:
        raise UsageError("--fleet-prometheus and --fleet-icinga are exclusive: the budget asks one source")
    source = "--fleet-icinga" if args.fleet_icinga is not None else "--fleet-prometheus"
    url = args.fleet_icinga if args.fleet_icinga is not None else args.fleet_prometheus
    given = [o for o, v in ((source, url), ("--fleet-group", args.fleet_group), ("--fleet-max", args.fleet_max))
             if v is not None]
    if given and len(given) < 3:
        instead = "" if args.fleet_icinga is not None else " (or --fleet-icinga in place of --fleet-prometheus)"
        raise UsageError(f"the fleet restart budget needs {source}, --fleet-group and --fleet-max together{instead} "
                         f"(given: {', '.join(given)})")
    args.fleet_login = args.fleet_ca_data = None
    if args.fleet_icinga_user_file is not None and args.fleet_icinga is None:
        raise UsageError("--fleet-icinga-user-file goes with --fleet-icinga")
    if args.fleet_ca_file is not None and url is None:
        raise UsageError("--fleet-ca-file goes with --fleet-icinga or --fleet-prometheus")
    if url is None:
        return
    check_url(url, source)
    if args.fleet_icinga is not None:
        _check_icinga(args)
    if args.fleet_ca_file is not None:
        args.fleet_ca_data = check_ca_file(args.fleet_ca_file, lambda row: "--fleet-ca-file")


def _check_icinga(args: argparse.Namespace) -> None:
    """The Icinga 2 API speaks HTTPS only and takes the login from its file, never from the URL (a status line
    and the process list show a URL)."""
    from check_vllm.contract.safe_text import without_userinfo

    if without_userinfo(args.fleet_icinga) != args.fleet_icinga:
        raise UsageError("--fleet-icinga must not carry user:password: put them in --fleet-icinga-user-file")
    if not args.fleet_icinga.lower().startswith("https://"):
        raise UsageError("--fleet-icinga must be an https:// URL: the Icinga 2 API speaks only HTTPS")
    if args.fleet_icinga_user_file is None:
        raise UsageError("--fleet-icinga needs --fleet-icinga-user-file (the ApiUser's user:password)")
    args.fleet_login = _read_login(args.fleet_icinga_user_file)


def _read_login(path: str) -> fleet.Login:
    """The ApiUser's login from its file, read as the check reads its key file (bounded, a regular file, never
    blocking); a refusal names the file, never a byte of what it holds."""
    name = "--fleet-icinga-user-file"
    where = f"{name} {path}" if os.path.lexists(path) else name  # a login given where its file belongs: unshown
    try:
        text = read_bounded(path, KEY_LIMIT).decode("utf-8")
    except OSError as err:
        raise UsageError(f"cannot read {where}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not UTF-8 text") from None
    login = fleet.login(text)
    if login is None:
        raise UsageError(f"{where} holds no user:password line (user and password both non-empty)")
    return login


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
