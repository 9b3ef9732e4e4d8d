"""`check_vllm --probe KIND`: the check's run, answered as an orchestrator's probe (exit 0 pass, 1 fail, one line).

The same observation, state file and options as the check (check_vllm.nagios.cli); only the answer differs,
and it comes from the pure table (check_vllm.probes.answers). Whatever goes wrong on our side (bad options,
argparse's own exit 2, a state file, our time-out, a bug) still ends in exit 0 or 1 and exactly one line:
a probe's own fault must never restart the server nor take it out of its Service.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from check_vllm.contract.engines import ENGINES
from check_vllm.probes import answers
from check_vllm.probes.answers import KINDS, Answer, Seen

if TYPE_CHECKING:
    from check_vllm.memory.door import Door


def answer(kind: str, seen: Seen) -> Answer:
    """The table's answer; a kind we do not know (argparse refuses it) is answered as liveness is: a pass."""
    return answers.answer(kind if kind in KINDS else answers.LIVENESS, seen)._replace(kind=kind)


def answer_run(kind: str, run: object, held: Door | None = None) -> Answer:
    """Observe once, as the check does (check_vllm.session: state file, lock, memory), and answer as a probe of
    `kind`; a fault of ours (the lock held too long, our time-out, a bug) is answered with what the state file
    said of the server (it served before, or not)."""
    from check_vllm.cli.args import Deadline
    from check_vllm.session import Run, session

    assert isinstance(run, Run)
    outcome = session(run, alone_when_refused=True, held=held)
    verdict = outcome.verdict
    if verdict is None:
        error = outcome.error
        why = outcome.fault if error is None or isinstance(error, Deadline) else \
            f"internal error: {error.__class__.__name__}: {error}"
        return answer(kind, Seen(fault=why, served_before=outcome.served_before))
    seen = Seen(verdict.word, verdict.code, verdict.summary,
                fault=outcome.unsaved, reading=bool(verdict.engines), served_before=outcome.served_before,
                loaded=verdict.loaded)
    return answer(kind, seen)


def answer_saved(kind: str, state_dir: Path, url: str, proxy: bool, within: float,
                 lock_timeout: float) -> tuple[Answer | None, Door | None]:
    """--reuse-verdict, before httpx is imported (such a run costs the interpreter's start and one small file):
    the answer the verdict another run saved gives, when it is a pass at most `within` seconds old
    (answers.reused). The state lock is taken first, so a probe started with another (the kubelet fires liveness
    and readiness together) waits while that one reads and then answers with its verdict. Otherwise (None, the
    store, still locked: the session reads under it), or (None, None) where the session decides alone (a
    refused directory, no lock to be had there); the lock held past its wait is answered here, as the session
    would (waiting twice would spend the probe's budget)."""
    import time

    from check_vllm.memory.door import Door

    if within <= 0 or kind not in (answers.LIVENESS, answers.READINESS):
        return None, None
    try:
        door = Door(state_dir, url, proxy, lock_timeout).open()
    except (OSError, ValueError):  # ValueError: a URL no run could judge
        return None, None
    if door.busy:
        return answer(kind, Seen(fault=door.busy, served_before=door.kept.served_before)), None
    if door.refused or door.unlocked:
        return None, None
    last = door.kept.memory.last
    reply = None
    if last is not None and last.code is not None and last.at is not None:
        seen = Seen(last.word, last.code, f"{last.word}: {last.text}" if last.text else last.word)
        reply = answers.reused(kind, seen, time.time() - last.at, within)
    if reply is None:
        return None, door
    door.close()
    return reply, None


def _said(out: str, err: str, code: object) -> str:
    """What the check would have told a scheduler, as the fault a probe passes in spite of."""
    for text in (out, err):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            line = lines[-1] if text is err else lines[0]
            named = any(line.startswith(f"{row.label} ") for row in ENGINES)
            return line.split(" - ", 1)[1] if named and " - " in line else line
    return f"the check exited {code!r} without a word"


def verbose_in(argv: Sequence[str]) -> bool:
    """-v anywhere before `--`: the held-back stderr goes out after the line."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == "--verbose" or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            return True
    return False


def guard(kind: str, body: Callable[[], Answer | None], verbose: bool = False, aside: str = "") -> NoReturn:
    """Run the check's `body` as a probe: the answer it returns, or any exit or exception of ours turned into one.

    The check's own output (a Nagios line, argparse's usage, a traceback) is held back: the probe prints one
    line of its own. With -v the held-back stderr follows on stderr (the kubelet keeps stdout and stderr
    together, so only on demand). `aside`: a fault of ours before the run (the agent gave no answer), said first."""
    out, err = io.StringIO(), io.StringIO()
    reply: Answer
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            given = body()
        reply = given if given is not None else answer(kind, Seen(fault=_said(out.getvalue(), err.getvalue(), None)))
    except SystemExit as exit_:
        reply = answer(kind, Seen(fault=_said(out.getvalue(), err.getvalue(), exit_.code)))
    except BaseException as exc:  # noqa: BLE001 - a probe's own bug is never a restart
        reply = answer(kind, Seen(fault=f"internal error: {exc.__class__.__name__}: {exc}"))
    if aside:
        reply = reply._replace(why=f"{aside}; {reply.why}", in_spite=reply.passed)
    if verbose and err.getvalue():
        sys.stderr.write(err.getvalue())
    from check_vllm.cli import statusline

    statusline.prepare()  # LC_ALL=C: a model id in another script is escaped, never an error
    print(reply.line())
    sys.stdout.flush()
    sys.exit(reply.code)
