"""check_vllm_restart: the one careful authority that restarts a vLLM server.

Icinga 2 (EventCommand) or Nagios (event_handler) calls it after check results with the service
state, state type and attempt. It restarts only when all of these hold:

- the service is CRITICAL and the state is HARD (SOFT retries are the scheduler still making sure);
- the check's own state file (not the output text) holds a fresh CRITICAL verdict of stuck, down or
  unresponsive, written after the last restart this handler made;
- the last restart is older than the cooldown (a large model takes minutes to load);
- fewer than --max-per-hour restarts happened in the last hour (circuit breaker: a server that a
  restart does not cure needs a human, not a restart loop).

An exclusive lock per server makes concurrent calls (every check result, a second service on the
same server) take turns, so one incident gives one restart. The restart history and the marker the
check reads ("starting" instead of "down" during start-up) live next to the check's state file.
Every call logs exactly one line saying what it decided and why.

Exit codes: 0 when it decided (acting or not), 1 when the restart command failed or timed out,
2 for bad usage (nothing is restarted).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from . import __version__
from .state import StateError, StateFile, default_dir, marker_path, state_path, target_key, write_json

PROG = "check_vllm_restart"

#: Verdicts that a restart can cure. "stalling" and "starting" are not proof; the rest are healthy.
RESTARTABLE = ("stuck", "down", "unresponsive")
CRITICAL = 2
HOUR = 3600.0
#: A verdict written this far in the future (clock steps between hosts/processes) is still accepted.
CLOCK_SLACK = 5.0
HISTORY_KEEP = 100

_STATES = {"0": "OK", "1": "WARNING", "2": "CRITICAL", "3": "UNKNOWN",
           "OK": "OK", "WARNING": "WARNING", "CRITICAL": "CRITICAL", "UNKNOWN": "UNKNOWN"}
_TYPES = {"0": "SOFT", "1": "HARD", "SOFT": "SOFT", "HARD": "HARD"}


class UsageError(Exception):
    pass


@dataclass(frozen=True)
class Policy:
    cooldown: float = 900.0
    max_per_hour: int = 3
    max_verdict_age: float = 600.0
    proxy: bool = False


@dataclass(frozen=True)
class Event:
    """What the scheduler told us: $SERVICESTATE$ $SERVICESTATETYPE$ $SERVICEATTEMPT$."""

    state: str  # OK | WARNING | CRITICAL | UNKNOWN
    state_type: str  # SOFT | HARD
    attempt: int | None = None


@dataclass(frozen=True)
class Decision:
    act: bool
    why: str
    #: "restart" when acting; otherwise "skip" (nothing to do) or "refuse" (would act, but a guard says no).
    kind: str = "skip"


def decide(event: Event, verdict: dict[str, Any] | None, problem: str | None, restarts: Sequence[float],
           policy: Policy, now: float) -> Decision:
    """The decision table: pure, no I/O. `restarts` are the wall-clock times of earlier restarts."""
    gate = screen(event)
    if gate is not None:
        return gate
    if not verdict:
        return Decision(False, f"no verdict in the check's state file ({problem or 'none written yet'})")
    word, code, at = verdict.get("word"), verdict.get("state"), _finite(verdict.get("at"))
    words = (*RESTARTABLE, "proxy") if policy.proxy else RESTARTABLE
    if word not in words:
        return Decision(False, f"the check's last verdict is {word!r}, not one of {'/'.join(words)}")
    if code != CRITICAL:
        return Decision(False, f"the check's last verdict {word!r} is not CRITICAL yet")
    if at is None:
        return Decision(False, f"the check's verdict {word!r} has no valid time")
    age = now - at
    if age > policy.max_verdict_age:
        return Decision(False, f"the check's verdict {word!r} is {age:.0f} s old "
                               f"(--max-verdict-age {policy.max_verdict_age:g}): not fresh")
    if age < -CLOCK_SLACK:
        return Decision(False, f"the check's verdict {word!r} is dated {-age:.0f} s in the future")
    last = max(restarts, default=None)
    if last is not None and at <= last:
        return Decision(False, f"verdict {word!r} was written {last - at:.0f} s before the last restart "
                               f"({now - last:.0f} s ago): waiting for a check of the restarted server")
    if last is not None and now - last < policy.cooldown:
        return Decision(False, f"verdict {word!r}, but the last restart was {now - last:.0f} s ago "
                               f"(cooldown {policy.cooldown:g} s)", "refuse")
    recent = [t for t in restarts if 0 <= now - t < HOUR]
    if len(recent) >= policy.max_per_hour:
        return Decision(False, f"verdict {word!r}, but circuit breaker open: {len(recent)} restarts in the last "
                               f"hour (--max-per-hour {policy.max_per_hour}); a restart does not cure this "
                               f"server, a human must look", "refuse")
    return Decision(True, f"verdict {word!r} ({verdict.get('text', '')}) {age:.0f} s old, service CRITICAL HARD",
                    "restart")


def screen(event: Event) -> Decision | None:
    """The part of the decision that needs no files: most calls are OK or SOFT results."""
    if event.state != "CRITICAL":
        return Decision(False, f"service is {event.state}, not CRITICAL")
    if event.state_type != "HARD":
        attempt = f" (attempt {event.attempt})" if event.attempt is not None else ""
        return Decision(False, f"CRITICAL but SOFT{attempt}: waiting for a HARD state")
    return None


def _finite(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


# --------------------------------------------------------------------------- files


def history_path(state_dir: Path, url: str) -> Path:
    m = marker_path(state_dir, url)
    return m.with_name(m.name.replace(".restart.json", ".restart-history.json"))


def load_history(store: StateFile) -> tuple[list[dict[str, Any]], str | None]:
    data, problem = store.load()
    raw = data.get("restarts")
    entries: list[Any] = raw if isinstance(raw, list) else []
    return [e for e in entries if isinstance(e, dict) and _finite(e.get("at")) is not None], problem


def run_command(argv: list[str], timeout: float) -> tuple[int | None, str]:
    """Run the restart command (no shell). Returns (exit code or None on timeout, last output line)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    except OSError as err:
        return 127, f"cannot run {argv[0]!r}: {err.strerror}"
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return None, f"timed out after {timeout:g} s and was killed"
    lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    return proc.returncode, (lines[-1].strip()[:200] if lines else "")


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _number(kind: type, low: float) -> Any:
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}: {text!r}")
        return value
    return convert


def parser() -> argparse.ArgumentParser:
    p = _Parser(
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
    e.add_argument("--attempt", type=_number(int, 1), metavar="N", help="$service.check_attempt$ / $SERVICEATTEMPT$ (logged)")
    t = p.add_argument_group("target (the same as the check's)")
    t.add_argument("-u", "--url", required=True, help="the vLLM base URL given to check_vllm")
    t.add_argument("--state-dir", metavar="DIR", help="the --state-dir given to check_vllm (same default)")
    t.add_argument("--proxy", action="store_true", help="the check runs with --proxy")
    g = p.add_argument_group("guards")
    g.add_argument("--cooldown", type=_number(float, 0), default=900.0, metavar="S",
                   help="no restart within S seconds of the last one: time to load the model (default %(default)g)")
    g.add_argument("--max-per-hour", type=_number(int, 1), default=3, metavar="N",
                   help="circuit breaker: no more than N restarts in any hour (default %(default)s)")
    g.add_argument("--max-verdict-age", type=_number(float, 1), default=600.0, metavar="S",
                   help="ignore a verdict older than S seconds, about twice the check interval (default %(default)g)")
    r = p.add_argument_group("run")
    r.add_argument("--command-timeout", type=_number(float, 1), default=600.0, metavar="S",
                   help="kill the restart command after S seconds (default %(default)g)")
    r.add_argument("--lock-timeout", type=_number(float, 0), default=10.0, metavar="S",
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
    url = urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise UsageError(f"--url must look like http://HOST:PORT, not {args.url!r}")
    if not command or not command[0]:
        raise UsageError("no restart command: give it after --, e.g. -- sudo systemctl restart vllm")
    return args, Event(state, state_type, args.attempt), command


class Logger:
    def __init__(self, url: str, log_file: str | None) -> None:
        self.url = url.rstrip("/")
        self.log_file = log_file

    def __call__(self, decision: str, why: str, event: Event | None = None) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        where = f" {event.state} {event.state_type}" if event else ""
        if event and event.attempt is not None:
            where += f" attempt {event.attempt}"
        line = f"{stamp} {PROG}[{os.getpid()}] {self.url}{where}: {decision}: {why}"
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
    history = StateFile(history_path(state_dir, url), target_key(url, "restart-history"), args.lock_timeout)
    try:
        history.lock()
    except StateError as err:
        log("no restart", f"another {PROG} call holds the restart lock for this server ({err})", event)
        return 0
    try:
        mode = "proxy" if args.proxy else "metrics"
        data, problem = StateFile(state_path(state_dir, url, mode), target_key(url, mode)).load()
        verdict = data.get("verdict") if isinstance(data.get("verdict"), dict) else None
        entries, hist_problem = load_history(history)
        # A restart counts from when its command finished (if it did): a verdict written while the old
        # process was being stopped is still a verdict about the old process.
        times = [max(float(e["at"]), _finite(e.get("done")) or 0.0) for e in entries]
        now = clock()
        decision = decide(event, verdict, problem, times, policy, now)
        if hist_problem and not decision.act:
            decision = Decision(False, f"{decision.why}; restart history: {hist_problem}", decision.kind)
        if not decision.act:
            log("no restart" if decision.kind == "skip" else "restart refused", decision.why, event)
            return 0
        if args.dry_run:
            log("would restart (--dry-run)", decision.why, event)
            return 0
        return _restart(args, event, command, log, decision, verdict or {}, entries, history, state_dir, url, now,
                        clock)
    finally:
        history.unlock()


def _restart(args: argparse.Namespace, event: Event, command: list[str], log: Logger, decision: Decision,
             verdict: dict[str, Any], entries: list[dict[str, Any]], history: StateFile, state_dir: Path,
             url: str, now: float, clock: Any) -> int:
    # Record the attempt before running it: a restart that hangs or kills us still counts for the
    # cooldown and the circuit breaker. The marker tells the check "starting" while it loads.
    entry = {"at": now, "verdict": verdict.get("word"), "command": command[0], "rc": None}
    entries = [*entries, entry][-HISTORY_KEEP:]
    marker = marker_path(state_dir, url)
    try:
        history.save({"restarts": entries})
        write_json(marker, {"restarted_at": now, "by": PROG, "verdict": verdict.get("word")})
    except (StateError, OSError) as err:
        log("no restart", f"{decision.why}, but the restart history cannot be written ({err}); "
                          "not restarting without a record", event)
        return 1
    started = time.monotonic()
    rc, tail = run_command(command, args.command_timeout)
    took = time.monotonic() - started
    done = clock()
    entry.update(rc=rc, seconds=round(took, 3), done=done)
    try:
        history.save({"restarts": entries})
    except StateError as err:
        print(f"{PROG}: restart history not updated: {err}", file=sys.stderr)
    if rc == 0:
        try:  # the start-up grace counts from the end of the restart: the model loads after it
            write_json(marker, {"restarted_at": done, "by": PROG, "verdict": verdict.get("word")})
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


if __name__ == "__main__":
    main()
