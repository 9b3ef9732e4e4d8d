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

import dataclasses
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from check_vllm.cli import statusline
from check_vllm.cli.args import UsageError
from check_vllm.cli.connection import endpoint_from
from check_vllm.cli.option_table import HANDLER
from check_vllm.contract.instants import Instant
from check_vllm.machine import clock as clocks
from check_vllm.memory.door import Door
from check_vllm.memory.statefile import StateError
from check_vllm.restart import post_mortem
from check_vllm.restart.command import run_command
from check_vllm.restart.config import Config, configured
from check_vllm.restart.history import (
    HISTORY_KEEP,
    bring_back,
    load_history,
    output_path,
    restart_times,
    stamp,
)
from check_vllm.restart.log import Logger
from check_vllm.restart.options import PROG, parse
from check_vllm.restart.policy import Decision, Event, decide, screen, this_hour
from check_vllm.restart.starting import still_loading

if TYPE_CHECKING:
    from check_vllm.server.fetch import Endpoint


class Weighed(NamedTuple):
    """The decision, the verdict's word it was taken on, and the restarts on record."""

    decision: Decision
    word: str | None
    entries: list[dict[str, Any]]
    event: Event | None = None


def handle(config: Config, event: Event, command: list[str], log: Logger,
           clock: Callable[[], Instant] = clocks.now) -> int:
    # Cheap exits first: most calls are OK or SOFT results and need neither lock nor files.
    early = screen(event)
    if early is not None:
        log("no restart" if early.kind == "skip" else "restart refused", early.why, event)
        return 0
    with config.door(clock) as door:
        if door.busy:
            log("no restart", f"another {PROG} call holds the restart lock for this server "
                              f"(waited {config.lock_timeout:g} s)", event)
            return 0
        if door.refused:  # another user could have written what it would decide on
            log("no restart", f"{door.refused}; not restarting on files it cannot trust", event)
            return 1
        if door.unlocked:  # not a concurrent call: a directory it cannot write, which needs a human
            log("no restart", f"cannot write the state directory {config.state_dir} ({door.unlocked}); "
                              "not restarting without a record", event)
            return 1
        weighed = weigh(config, event, door)
        if not weighed.decision.act:
            log("no restart" if weighed.decision.kind == "skip" else "restart refused", weighed.decision.why, event)
            return 0
        if config.dry_run:
            log("would restart (--dry-run)", weighed.decision.why, event)
            return 0
        return _restart(config, door, weighed, command, partial(log, event=event), clock)


def weigh(config: Config, event: Event, door: Door) -> Weighed:
    """The decision on what the files and the host say now (the history lock held), and the fleet's budget of a
    restart it would make: the handler's, and --status's, which reports it without acting."""
    kept, history, at = door.kept, door.lock_on, door.at
    verdict = kept.memory.last
    entries, hist_problem = load_history(history)
    stepped = bring_back(entries, at)
    if stepped:
        hist_problem = "; ".join(filter(None, (hist_problem, stepped)))
        try:
            history.save({"restarts": entries})
        except StateError as err:
            hist_problem = f"{hist_problem} (not saved: {err})"
    decision = decide(event, verdict, kept.state_note, restart_times(entries, at), config.policy, at.wall)
    if decision.act and verdict is not None:  # never on a start the check could not see yet
        loading = still_loading(config.url, kept.memory, verdict.word, config.lifecycle, config.process, kept.marker)
        if loading:
            decision = Decision(False, f"verdict {verdict.word!r}, but the server is {loading}", "refuse")
    if decision.act and config.fleet is not None:  # the fleet is asked only of a restart it would make
        from check_vllm.restart.fleet_ask import consult

        decision = consult(config.fleet, decision)
    if hist_problem:  # said whether or not it acts: the guards decided on what was left of the history
        decision = Decision(decision.act, f"{decision.why}; {hist_problem}", decision.kind)
    return Weighed(decision, verdict.word if verdict else None, entries, event)


def _restart(config: Config, door: Door, weighed: Weighed, command: list[str], log: Callable[[str, str], None],
             clock: Callable[[], Instant]) -> int:
    # Record the attempt before running it: a restart that hangs or kills us still counts for the
    # cooldown and the circuit breaker. The marker tells the check "starting" while it loads.
    why, word, history = weighed.decision.why, weighed.word, door.lock_on
    entry = {**stamp(door.at), "verdict": word, "command": command[0], "rc": None}
    entries = [*weighed.entries, entry][-HISTORY_KEEP:]
    try:
        history.save({"restarts": entries})
        door.mark(door.at, by=PROG, verdict=word, in_progress=True)
    except (StateError, OSError) as err:
        log("no restart", f"{why}, but the restart history cannot be written ({err}); not restarting without a record")
        return 1
    said = _post_mortem(config, door, weighed)
    started = time.monotonic()
    rc, tail = run_command(command, config.command_timeout, output_path(config.state_dir, config.url))
    took = time.monotonic() - started
    done = clock()
    entry.update(rc=rc, seconds=round(took, 3), **stamp(done, "done"))
    try:
        history.save({"restarts": entries})
    except StateError as err:
        print(f"{PROG}: restart history not updated: {err}", file=sys.stderr)
    if rc == 0:
        try:  # the start-up grace counts from the end of the restart: the model loads after it
            door.mark(done, by=PROG, verdict=word)
        except OSError as err:
            print(f"{PROG}: restart marker not updated: {err.strerror}", file=sys.stderr)
    count = f"restart {this_hour(restart_times(entries, done), done.wall)} of at most {config.policy.max_per_hour} this hour"
    if rc == 0:
        log("restarted", f"{why}; ran {command[0]} in {took:.1f} s ({count}); {said}")
        return 0
    door.unmark()  # it did not restart: do not let the check call a dead server "starting"
    what = "timed out" if rc is None else f"exited {rc}"
    log("restart failed", f"{why}; {command[0]} {what}{': ' + tail if tail else ''} ({count}); {said}")
    return 1


def _post_mortem(config: Config, door: Door, weighed: Weighed) -> str:
    """The post-mortem, once the restart is decided and recorded (check_vllm.restart.post_mortem); a fault of
    ours in it is said in the log line, never a reason not to restart."""
    try:
        event = dataclasses.asdict(weighed.event) if weighed.event else {}
        proof = post_mortem.evidence(config.url, door, event, weighed.decision.why, weighed.entries)
        return post_mortem.take(config.post_mortem, door, config.url, config.process, _reach(config), proof)
    except Exception as err:  # noqa: BLE001 - the restart it precedes must happen whatever fails here
        traceback.print_exc(file=sys.stderr)
        return f"no post-mortem: {err.__class__.__name__}: {err}"


def _reach(config: Config) -> Callable[[], Endpoint] | None:
    """The server's connection from the check's rows, made only when a post-mortem reads the last page."""
    return partial(endpoint_from, config.connection, HANDLER) if config.connection else None


def _post_mortem_only(config: Config, now: bool) -> int:
    """--post-mortems (the listing) or --take-post-mortem (one now, of a proven hang only): exit 0, 1 on a fault."""
    if not now:
        return post_mortem.list_bundles(config.post_mortem.mine(config.door()))
    with config.door() as door:
        said = post_mortem.take_now(config.post_mortem._replace(enabled=True), door, config.url, config.process,
                                    _reach(config), config.policy)
    taken = said.startswith("post-mortem")
    Logger(config.url, None)("post-mortem" if taken else "no post-mortem", said.removeprefix("no post-mortem: "))
    return 0


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
    if args.post_mortems or args.take_post_mortem:
        sys.exit(_post_mortem_only(configured(args), args.take_post_mortem))
    if args.status:
        from check_vllm.restart.status import report

        try:
            config = configured(args)
            sys.exit(report(event, config.door, lambda seen, door: weigh(config, seen, door).decision,
                            lambda door: post_mortem.latest(config.post_mortem.mine(door))))
        except Exception as err:  # noqa: BLE001 - a check has no room for a traceback on stdout
            traceback.print_exc(file=sys.stderr)
            print(f"VLLM_RESTART UNKNOWN - internal error: {err.__class__.__name__}: {err}")
            sys.exit(3)
    log = Logger(args.url, args.log)
    try:
        sys.exit(handle(configured(args), event, command, log))
    except KeyboardInterrupt:
        sys.exit(1)
    except Exception as err:  # noqa: BLE001 - a bug must still leave its one decision line in the log
        traceback.print_exc(file=sys.stderr)
        log("no restart", f"internal error: {err.__class__.__name__}: {err}", event)
        sys.exit(1)


if __name__ == "__main__":
    main()
