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
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Remembered
from check_vllm.contract.safe_text import without_userinfo
from check_vllm.front import option_table, statusline
from check_vllm.front.args import UsageError
from check_vllm.front.option_table import HANDLER
from check_vllm.memory import codec as memory
from check_vllm.memory import statedir
from check_vllm.memory.files import write_json
from check_vllm.memory.marker import marker_json, marker_path, read_marker
from check_vllm.memory.statefile import (
    StateBusy,
    StateError,
    StateFile,
    StateRefused,
    check_file,
    default_dir,
)
from check_vllm.restart.command import run_command
from check_vllm.restart.history import (
    HISTORY_KEEP,
    bring_back,
    history_file,
    load_history,
    output_path,
    restart_times,
    stamp,
)
from check_vllm.restart.options import PROG, parse
from check_vllm.restart.policy import Decision, Event, Policy, decide, screen, this_hour
from check_vllm.restart.starting import still_loading
from check_vllm.server import clock as clocks

# --------------------------------------------------------------------------- command line


class Logger:
    def __init__(self, url: str, log_file: str | None) -> None:
        self.url = without_userinfo(url.rstrip("/"))  # the log and the scheduler show it: never a password
        self.log_file = log_file

    def __call__(self, decision: str, why: str, event: Event | None = None) -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        where = f" {event.service_state} {event.state_type}" if event else ""
        if event and event.attempt is not None:
            where += f" attempt {event.attempt}"
        # One line, whatever the state file's verdict text or the command's output held.
        line = statusline.fit(f"{when} {PROG}[{os.getpid()}] {self.url}{where}: {decision}: {why}", 4000, "utf-8",
                              pipe=False)
        line = line.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates from JSON
        print(line, flush=True)
        if self.log_file:
            try:
                fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
                statedir.hand_over(fd, Path(self.log_file).parent)  # root's manual run: still the user's log
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as err:
                print(f"{PROG}: cannot append to --log {self.log_file}: {err.strerror}", file=sys.stderr)


def handle(args: argparse.Namespace, event: Event, command: list[str], log: Logger,
           clock: Callable[[], Instant] = clocks.now) -> int:
    state_dir = Path(args.state_dir) if args.state_dir else default_dir()
    url = args.url.rstrip("/")
    # Cheap exits first: most calls are OK or SOFT results and need neither lock nor files.
    early = screen(event)
    if early is not None:
        log("no restart" if early.kind == "skip" else "restart refused", early.why, event)
        return 0
    history = history_file(state_dir, url, args.lock_timeout)
    try:
        history.lock()
    except StateBusy:
        log("no restart", f"another {PROG} call holds the restart lock for this server "
                          f"(waited {args.lock_timeout:g} s)", event)
        return 0
    except StateRefused as err:  # another user could have written what it would decide on
        log("no restart", f"{err}; not restarting on files it cannot trust", event)
        return 1
    except StateError as err:  # not a concurrent call: a directory it cannot write, which needs a human
        log("no restart", f"cannot write the state directory {state_dir} ({err}); "
                          "not restarting without a record", event)
        return 1
    try:
        now = clock()
        decision, verdict, entries = weigh(args, event, history, state_dir, url, now)
        if not decision.act:
            log("no restart" if decision.kind == "skip" else "restart refused", decision.why, event)
            return 0
        if args.dry_run:
            log("would restart (--dry-run)", decision.why, event)
            return 0
        return _restart(args, event, command, log, decision, verdict.word if verdict else None, entries, history,
                        state_dir, url, now, clock)
    finally:
        history.unlock()


def weigh(args: argparse.Namespace, event: Event, history: StateFile, state_dir: Path, url: str,
          at: Instant) -> tuple[Decision, Remembered | None, list[dict[str, Any]]]:
    """The decision on what the files and the host say now (the history lock held): the handler's, and
    --status's, which reports it without acting."""
    policy = Policy(cooldown=args.cooldown, max_per_hour=args.max_per_hour,
                    max_verdict_age=args.max_verdict_age, proxy=args.proxy)
    data, problem = check_file(state_dir, url, args.proxy).load()
    saved = memory.from_json(data)
    verdict = saved.last
    now = at.wall
    entries, hist_problem = load_history(history)
    stepped = bring_back(entries, at)
    if stepped:
        hist_problem = "; ".join(filter(None, (hist_problem, stepped)))
        try:
            history.save({"restarts": entries})
        except StateError as err:
            hist_problem = f"{hist_problem} (not saved: {err})"
    decision = decide(event, verdict, problem, restart_times(entries, at), policy, now)
    if decision.act and verdict is not None:  # never on a start the check could not see yet
        lifecycle = option_table.settings_from(args, HANDLER)
        process = option_table.options_from(args, HANDLER)
        loading = still_loading(url, saved, verdict.word, lifecycle, process,
                                read_marker(marker_path(state_dir, url), at))
        if loading:
            decision = Decision(False, f"verdict {verdict.word!r}, but the server is {loading}", "refuse")
    if hist_problem:  # said whether or not it acts: the guards decided on what was left of the history
        decision = Decision(decision.act, f"{decision.why}; {hist_problem}", decision.kind)
    return decision, verdict, entries


def _restart(args: argparse.Namespace, event: Event, command: list[str], log: Logger, decision: Decision,
             word: str | None, entries: list[dict[str, Any]], history: StateFile, state_dir: Path,
             url: str, at: Instant, clock: Callable[[], Instant]) -> int:
    # Record the attempt before running it: a restart that hangs or kills us still counts for the
    # cooldown and the circuit breaker. The marker tells the check "starting" while it loads.
    entry = {**stamp(at), "verdict": word, "command": command[0], "rc": None}
    entries = [*entries, entry][-HISTORY_KEEP:]
    marker = marker_path(state_dir, url)
    try:
        history.save({"restarts": entries})
        write_json(marker, marker_json(at, by=PROG, verdict=word, in_progress=True))
    except (StateError, OSError) as err:
        log("no restart", f"{decision.why}, but the restart history cannot be written ({err}); "
                          "not restarting without a record", event)
        return 1
    started = time.monotonic()
    rc, tail = run_command(command, args.command_timeout, output_path(state_dir, url))
    took = time.monotonic() - started
    done = clock()
    entry.update(rc=rc, seconds=round(took, 3), **stamp(done, "done"))
    try:
        history.save({"restarts": entries})
    except StateError as err:
        print(f"{PROG}: restart history not updated: {err}", file=sys.stderr)
    if rc == 0:
        try:  # the start-up grace counts from the end of the restart: the model loads after it
            write_json(marker, marker_json(done, by=PROG, verdict=word))
        except OSError as err:
            print(f"{PROG}: restart marker not updated: {err.strerror}", file=sys.stderr)
    count = f"restart {this_hour(restart_times(entries, done), done.wall)} of at most {args.max_per_hour} this hour"
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
    as_check = "--status" in argv[:argv.index("--")] if "--" in argv else "--status" in argv
    try:
        args, event, command = parse(argv)
    except UsageError as err:
        if as_check:  # a check's usage error is UNKNOWN (3): 2 would read as CRITICAL
            print(f"VLLM_RESTART UNKNOWN - usage: {err} (see --help)")
            sys.exit(3)
        print(f"{PROG}: usage error: {err}; nothing restarted (see --help)")
        sys.exit(2)
    except SystemExit as exit_:  # --help, --version
        sys.exit(0 if exit_.code in (0, None) else (3 if as_check else 2))
    if args.status:
        from check_vllm.restart.status import report

        try:
            sys.exit(report(args, event, weigh))
        except Exception as err:  # noqa: BLE001 - a check has no room for a traceback on stdout
            traceback.print_exc(file=sys.stderr)
            print(f"VLLM_RESTART UNKNOWN - internal error: {err.__class__.__name__}: {err}")
            sys.exit(3)
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
