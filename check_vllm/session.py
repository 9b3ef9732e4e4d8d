"""One run of the check with its state file: lock, load, the restart marker, observe, save; and what came of it,
as a plain value that the Nagios adapter (check_vllm.nagios.plugin) and the orchestrator probe
(check_vllm.nagios.probe) read alike. Nothing here raises for a state file: every fault of ours is in the outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from check_vllm.contract.defaults import LOCK_TIMEOUT, Options, Settings
from check_vllm.contract.engines import AUTO, VLLM
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.verdict import Verdict
from check_vllm.memory import codec, prune
from check_vllm.memory.marker import load_marker, marker_path
from check_vllm.memory.statefile import StateBusy, StateError, StateFile, StateRefused, check_file, served_before
from check_vllm.observe import observe
from check_vllm.server import clock
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


def session(run: Run, alone_when_refused: bool = False, held: StateFile | None = None) -> Outcome:
    """The run: its outcome. `alone_when_refused`: in a refused state directory, read the server alone and
    touch nothing there (a probe's startup must not spend the orchestrator's budget on a server it reads
    serving); otherwise such a run does not judge (the check says UNKNOWN). `held`: this run's state file, its
    lock already taken (a probe that looked for a verdict to reuse under it)."""
    store = held or check_file(run.state_dir, run.endpoint.url, run.options.proxy, run.lock_timeout)
    run.doing("the state file lock")
    refused = unsaved = ""
    try:
        if held is None:
            store.lock()
    except StateRefused as err:  # what is in it may be another user's: read nothing there
        if not alone_when_refused:
            return Outcome(None, fault=str(err))
        refused = unsaved = f"{err}; {ALONE}"
    except StateBusy as err:  # the file is read once without the lock, for what it remembers (saves are renames)
        return Outcome(None, fault=str(err), served_before=served_before(store))
    except StateError as err:  # no lock can be made there: judge this run alone, and say so
        unsaved = _blind(str(err))
    served = False
    try:
        remembered, marker, note, served = (Memory(), None, "", False) if refused else _recall(run, store)
        if not refused:
            unsaved = unsaved or _blind(store.unwritable())
        if unsaved:  # a baseline this run cannot replace would compare the server's past, not its present
            remembered = Memory()
        with run.endpoint.client() as client:
            verdict = observe(client, run.endpoint, remembered, run.settings, run.options,
                              deadline=run.deadline, marker=marker, doing=run.doing).verdict
        run.doing("writing the state file")
        if not unsaved:
            try:
                store.save(codec.to_json(verdict.memory))
                prune.sweep(store.path.parent)  # gone containers' files, a few a run
            except StateError as err:
                unsaved = f"state not saved: {err}"
    except Exception as err:  # noqa: BLE001 - the run's -t (Deadline) or a bug: the front end words it
        return Outcome(None, fault=str(err), served_before=served, error=err)
    finally:
        store.unlock()
    return Outcome(verdict, unsaved=unsaved, note=note, served_before=served, engine=_engine(run, verdict))


def _engine(run: Run, verdict: Verdict) -> str:
    """--engine's, else the newest reading's (a server that stopped serving is still the engine it was)."""
    if run.options.engine != AUTO:
        return run.options.engine
    if verdict.engine:  # a run without a reading whose evidence named it
        return verdict.engine
    base = verdict.memory.baseline
    return base.reading.engine if base is not None else VLLM.key


def _recall(run: Run, store: StateFile) -> tuple[Memory, Instant | None, str, bool]:
    """The memory, the restart marker, what loading them said, and whether the server served before."""
    saved, note = store.load()
    remembered = codec.from_json(saved)
    marker, marker_note = load_marker(marker_path(run.state_dir, run.endpoint.url), clock.now())
    return remembered, marker, "; ".join(filter(None, (note, marker_note))), remembered.baseline is not None


def _blind(why: str | None) -> str:
    return f"state not saved: {why}; {ALONE}" if why else ""
