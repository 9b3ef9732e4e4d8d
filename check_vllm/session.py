"""One run of the check with its state file: lock, load, the restart marker, observe, save; and what came of it,
as a plain value that the Nagios adapter (check_vllm.nagios.plugin) and the orchestrator probe
(check_vllm.probes.exec_probe) read alike. Nothing here raises for a state file: every fault of ours is in the outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from check_vllm.contract.defaults import LOCK_TIMEOUT, Options, Settings
from check_vllm.contract.engines import AUTO, VLLM
from check_vllm.contract.kept import Memory
from check_vllm.contract.verdict import Verdict
from check_vllm.memory.door import Door
from check_vllm.observe import observe
from check_vllm.server.fetch import Endpoint

ALONE = "judged on this run alone (a stall cannot be proven across runs)"


class Run(NamedTuple):
    """Everything one run needs, decided by the command line."""

    endpoint: Endpoint
    settings: Settings
    options: Options
    state_dir: Path
    deadline: float  # monotonic
    lock_timeout: float = LOCK_TIMEOUT
    doing: Callable[[str], None] = lambda what: None


class Outcome(NamedTuple):
    """What one run came to. `verdict` None: it could not judge, and `fault` says why (the lock held by another
    run; a refused state directory, for the check). `unsaved`: why the run judged alone and saved nothing.
    `note`: what the state file and the marker said (a corrupt file, a marker ignored). `served_before`: the
    state file kept a reading, so the server served before this run. `error`: what ended the run before a
    verdict (the run's -t, a bug of ours), for a front end that reports it its own way."""

    verdict: Verdict | None
    fault: str = ""
    unsaved: str = ""
    note: str = ""
    served_before: bool = False
    error: Exception | None = None
    #: Whose server it is (a key of check_vllm.contract.engines.BY_KEY): --engine's, else the newest reading's.
    engine: str = VLLM.key


def session(run: Run, alone_when_refused: bool = False, held: Door | None = None) -> Outcome:
    """The run: its outcome. `alone_when_refused`: in a refused state directory, read the server alone and
    touch nothing there (a probe's startup must not spend the orchestrator's budget on a server it reads
    serving); otherwise such a run does not judge (the check says UNKNOWN). `held`: this run's store, its
    lock already taken (a probe that looked for a verdict to reuse under it)."""
    door = held or Door(run.state_dir, run.endpoint.url, run.options.proxy, run.lock_timeout)
    run.doing("the state file lock")
    try:
        with door:
            kept = door.kept
            if door.busy:
                return Outcome(None, fault=door.busy, served_before=kept.served_before)
            if door.refused and not alone_when_refused:
                return Outcome(None, fault=door.refused)
            unsaved = f"{door.refused}; {ALONE}" if door.refused else _blind(door.unlocked or door.unwritable)
            # a baseline this run cannot replace would compare the server's past, not its present
            remembered = Memory() if unsaved else kept.memory
            with run.endpoint.client() as client:
                verdict = observe(client, run.endpoint, remembered, run.settings, run.options,
                                  deadline=run.deadline, marker=kept.marker, doing=run.doing).verdict
            run.doing("writing the state file")
            door.keep(verdict.memory)
    except Exception as err:  # noqa: BLE001 - the run's -t (Deadline) or a bug: the front end words it
        return Outcome(None, fault=str(err), served_before=door.kept.served_before, error=err)
    unsaved = unsaved or (f"state not saved: {door.unsaved}" if door.unsaved else "")
    engine = run.options.engine if run.options.engine != AUTO else _engine(verdict)
    return Outcome(verdict, unsaved=unsaved, note=kept.note, served_before=kept.served_before, engine=engine)


def _engine(verdict: Verdict) -> str:
    """Without --engine, whose server it is: the newest reading's (a server that stopped serving is still the
    engine it was)."""
    if verdict.engine:  # a run without a reading whose evidence named it
        return verdict.engine
    base = verdict.memory.baseline
    return base.reading.engine if base is not None else VLLM.key


def _blind(why: str | None) -> str:
    return f"state not saved: {why}; {ALONE}" if why else ""
