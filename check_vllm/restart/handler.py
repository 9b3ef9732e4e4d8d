"""check_vllm_restart: the one careful authority that restarts a vLLM server.

Icinga 2 (EventCommand) or Nagios (event_handler) calls it after check results with the service
state, state type and attempt; when it may restart is check_vllm.restart.policy.

An exclusive lock per server makes concurrent calls (every check result, a second service on the
same server) take turns, so one incident gives one restart. The restart history and the marker the
check reads ("starting" instead of "down" during start-up) live next to the check's state file.
Every call logs exactly one line saying what it decided and why.

Exit codes: 0 when it decided (acting or not), 1 when the restart command failed or timed out,
2 for bad usage (nothing is restarted).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn

from check_vllm import __version__
from check_vllm.contract.vocab import CODE_NAMES, LOCK_TIMEOUT
from check_vllm.memory import codec as memory
from check_vllm.memory.statefile import (
    StateBusy,
    StateError,
    StateFile,
    check_file,
    default_dir,
    legacy_key,
    marker_path,
    target_key,
    write_json,
)
from check_vllm.nagios import statusline
from check_vllm.nagios.args import Parser, UsageError, check_url, number
from check_vllm.restart.command import run_command
from check_vllm.restart.history import (
    HISTORY_KEEP,
    bring_back,
    counted_from,
    history_path,
    load_history,
    output_path,
)
from check_vllm.restart.policy import HOUR, Decision, Event, Policy, decide, screen

PROG = "check_vllm_restart"

#: Seconds before a restart command that has not finished is killed.
COMMAND_TIMEOUT = 600.0
DEFAULT = Policy()

#: $SERVICESTATE$ as a name or as the plugin exit code it stands for.
_STATES = {**{str(code): name for code, name in enumerate(CODE_NAMES)}, **{name: name for name in CODE_NAMES}}
_TYPES = {"0": "SOFT", "1": "HARD", "SOFT": "SOFT", "HARD": "HARD"}


# --------------------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        usage=f"{PROG} --state STATE --state-type TYPE [--attempt N] --url URL [options] -- COMMAND [ARG ...]",
        description="Restart a vLLM server, only when check_vllm's own state proves it stuck or down. "
                    "Call it as the event handler of the service that runs check_vllm.",
        epilog="It restarts only for a CRITICAL HARD state whose check_vllm verdict (read from the state file) is "
               "stuck, down or unresponsive, fresh, and newer than the last restart; never within the cooldown, "
               "never beyond --max-per-hour. The command after -- runs without a shell. Exit codes: 0 decided "
               "(whether or not it restarted), 1 the restart command failed or timed out, 2 bad usage.",
    )
    e = p.add_argument_group("event (from the scheduler)")
    e.add_argument("--state", required=True, help="$service.state$ / $SERVICESTATE$: OK, WARNING, CRITICAL, UNKNOWN")
    e.add_argument("--state-type", required=True, metavar="TYPE", help="$service.state_type$ / $SERVICESTATETYPE$: SOFT or HARD")
    e.add_argument("--attempt", type=number(int, 1), metavar="N", help="$service.check_attempt$ / $SERVICEATTEMPT$ (logged)")
    t = p.add_argument_group("target (the same as the check's)")
    t.add_argument("-u", "--url", required=True, help="the vLLM base URL given to check_vllm")
    t.add_argument("--state-dir", metavar="DIR", help="the --state-dir given to check_vllm (same default)")
    t.add_argument("--proxy", action="store_true", help="the check runs with --proxy")
    g = p.add_argument_group("guards")
    g.add_argument("--cooldown", type=number(float, 0), default=DEFAULT.cooldown, metavar="S",
                   help="no restart within S seconds of the last one: time to load the model (default %(default)g)")
    g.add_argument("--max-per-hour", type=number(int, 1), default=DEFAULT.max_per_hour, metavar="N",
                   help="circuit breaker: no more than N restarts in any hour (default %(default)s)")
    g.add_argument("--max-verdict-age", type=number(float, 1), default=DEFAULT.max_verdict_age, metavar="S",
                   help="ignore a verdict older than S seconds, about twice the check interval (default %(default)g)")
    r = p.add_argument_group("run")
    r.add_argument("--command-timeout", type=number(float, 1), default=COMMAND_TIMEOUT, metavar="S",
                   help="kill the restart command after S seconds (default %(default)g)")
    r.add_argument("--lock-timeout", type=number(float, 0), default=LOCK_TIMEOUT, metavar="S",
                   help="wait this long for a concurrent call to finish deciding (default %(default)g)")
    r.add_argument("--log", metavar="FILE", help="also append each decision line to FILE")
    r.add_argument("--dry-run", action="store_true", help="decide and log, but do not run the command")
    r.add_argument("-V", "--version", action="version", version=f"{PROG} {__version__}")
    return p


def _parse(argv: list[str]) -> tuple[argparse.Namespace, Event, list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    else:
        command = []
    args = parser().parse_args(argv)
    state = _STATES.get(args.state.strip().upper())
    if state is None:
        raise UsageError(f"--state must be OK, WARNING, CRITICAL or UNKNOWN (or 0-3), not {args.state!r}")
    state_type = _TYPES.get(args.state_type.strip().upper())
    if state_type is None:
        raise UsageError(f"--state-type must be SOFT or HARD (or 0/1), not {args.state_type!r}")
    check_url(args.url)
    if not command or not command[0]:
        raise UsageError("no restart command: give it after --, e.g. -- sudo systemctl restart vllm")
    return args, Event(state, state_type, args.attempt), command


class Logger:
    def __init__(self, url: str, log_file: str | None) -> None:
        self.url = url.rstrip("/")
        self.log_file = log_file

    def __call__(self, decision: str, why: str, event: Event | None = None) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        where = f" {event.service_state} {event.state_type}" if event else ""
        if event and event.attempt is not None:
            where += f" attempt {event.attempt}"
        # One line, whatever the state file's verdict text or the command's output held.
        line = statusline.fit(f"{stamp} {PROG}[{os.getpid()}] {self.url}{where}: {decision}: {why}", 4000, "utf-8",
                              pipe=False)
        line = line.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates from JSON
        print(line, flush=True)
        if self.log_file:
            try:
                fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as err:
                print(f"{PROG}: cannot append to --log {self.log_file}: {err.strerror}", file=sys.stderr)


def handle(args: argparse.Namespace, event: Event, command: list[str], log: Logger,
           clock: Any = time.time) -> int:
    state_dir = Path(args.state_dir) if args.state_dir else default_dir()
    policy = Policy(cooldown=args.cooldown, max_per_hour=args.max_per_hour,
                    max_verdict_age=args.max_verdict_age, proxy=args.proxy)
    url = args.url.rstrip("/")
    # Cheap exits first: most calls are OK or SOFT results and need neither lock nor files.
    early = screen(event)
    if early is not None:
        log("no restart", early.why, event)
        return 0
    # Keyed by the server, not by the spelling of its URL; a history kept under the spelling (before
    # 2.x) is read until the first save, so no cooldown or breaker is lost in the change.
    history = StateFile(history_path(state_dir, url), target_key(url, "restart-history"), args.lock_timeout,
                        what="restart history", fresh="starting afresh",
                        legacy=(history_path(state_dir, url, legacy=True), legacy_key(url, "restart-history")))
    try:
        history.lock()
    except StateBusy:
        log("no restart", f"another {PROG} call holds the restart lock for this server "
                          f"(waited {args.lock_timeout:g} s)", event)
        return 0
    except StateError as err:  # not a concurrent call: a directory it cannot write, which needs a human
        log("no restart", f"cannot write the state directory {state_dir} ({err}); "
                          "not restarting without a record", event)
        return 1
    try:
        data, problem = check_file(state_dir, url, args.proxy).load()
        verdict = memory.from_json(data).last
        entries, hist_problem = load_history(history)
        now = clock()
        stepped = bring_back(entries, now)
        if stepped:
            hist_problem = "; ".join(filter(None, (hist_problem, stepped)))
            try:
                history.save({"restarts": entries})
            except StateError as err:
                hist_problem = f"{hist_problem} (not saved: {err})"
        times = [counted_from(e) for e in entries]
        decision = decide(event, verdict, problem, times, policy, now)
        if hist_problem:  # said whether or not it acts: the guards decided on what was left of the history
            decision = Decision(decision.act, f"{decision.why}; {hist_problem}", decision.kind)
        if not decision.act:
            log("no restart" if decision.kind == "skip" else "restart refused", decision.why, event)
            return 0
        if args.dry_run:
            log("would restart (--dry-run)", decision.why, event)
            return 0
        return _restart(args, event, command, log, decision, verdict.word if verdict else None, entries, history, state_dir, url, now,
                        clock)
    finally:
        history.unlock()


def _restart(args: argparse.Namespace, event: Event, command: list[str], log: Logger, decision: Decision,
             word: str | None, entries: list[dict[str, Any]], history: StateFile, state_dir: Path,
             url: str, now: float, clock: Any) -> int:
    # Record the attempt before running it: a restart that hangs or kills us still counts for the
    # cooldown and the circuit breaker. The marker tells the check "starting" while it loads.
    entry = {"at": now, "verdict": word, "command": command[0], "rc": None}
    entries = [*entries, entry][-HISTORY_KEEP:]
    marker = marker_path(state_dir, url)
    try:
        history.save({"restarts": entries})
        write_json(marker, {"restarted_at": now, "by": PROG, "verdict": word})
    except (StateError, OSError) as err:
        log("no restart", f"{decision.why}, but the restart history cannot be written ({err}); "
                          "not restarting without a record", event)
        return 1
    started = time.monotonic()
    rc, tail = run_command(command, args.command_timeout, output_path(state_dir, url))
    took = time.monotonic() - started
    done = clock()
    entry.update(rc=rc, seconds=round(took, 3), done=done)
    try:
        history.save({"restarts": entries})
    except StateError as err:
        print(f"{PROG}: restart history not updated: {err}", file=sys.stderr)
    if rc == 0:
        try:  # the start-up grace counts from the end of the restart: the model loads after it
            write_json(marker, {"restarted_at": done, "by": PROG, "verdict": word})
        except OSError as err:
            print(f"{PROG}: restart marker not updated: {err.strerror}", file=sys.stderr)
    recent = sum(1 for e in entries if 0 <= clock() - float(e["at"]) < HOUR)
    count = f"restart {recent} of at most {args.max_per_hour} this hour"
    if rc == 0:
        log("restarted", f"{decision.why}; ran {command[0]} in {took:.1f} s ({count})", event)
        return 0
    try:
        marker.unlink()  # it did not restart: do not let the check call a dead server "starting"
    except OSError:
        pass
    what = "timed out" if rc is None else f"exited {rc}"
    log("restart failed", f"{decision.why}; {command[0]} {what}{': ' + tail if tail else ''} ({count})", event)
    return 1


def main(argv: list[str] | None = None) -> NoReturn:
    argv = list(sys.argv[1:] if argv is None else argv)
    statusline.prepare()
    try:
        args, event, command = _parse(argv)
    except UsageError as err:
        print(f"{PROG}: usage error: {err}; nothing restarted (see --help)")
        sys.exit(2)
    except SystemExit as exit_:  # --help, --version
        sys.exit(0 if exit_.code in (0, None) else 2)
    log = Logger(args.url, args.log)
    try:
        sys.exit(handle(args, event, command, log))
    except KeyboardInterrupt:
        sys.exit(1)
    except Exception as err:  # noqa: BLE001 - a bug must still leave its one decision line in the log
        traceback.print_exc(file=sys.stderr)
        log("no restart", f"internal error: {err.__class__.__name__}: {err}", event)
        sys.exit(1)


if __name__ == "__main__":
    main()
