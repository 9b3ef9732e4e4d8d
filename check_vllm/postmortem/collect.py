"""A post-mortem of a hung server, taken before its restart destroys it (issue 48): every step under one time
budget, so the restart behind it is never held longer, whatever a dumper or the server does. The cheap and
certain parts first (the evidence, /proc, the versions), the dumps after, each with its share of what is left;
the /metrics page is read once in a thread meanwhile. A step that runs out of time, fails or finds its tool
missing says so in the bundle, and the rest goes on."""

from __future__ import annotations

import functools
import os
import platform
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from check_vllm.postmortem import dumpers, readme, retention, stacks, versions
from check_vllm.postmortem import procs as procfs
from check_vllm.postmortem.bundle import Bundle, BundleRefused
from check_vllm.postmortem.dumpers import Tools

#: The bundles kept by default, and the bytes all of them may hold (one bundle of a big vLLM is ~1-3 MB).
KEEP = 20
MAX_BYTES = 256 << 20
#: The /metrics page kept (vLLM's is ~50 KB; a page this big is cut).
METRICS_MAX = 4 << 20
#: The server's word on its version is waited for this long after the dumps (it was asked before them).
VERSION_WAIT = 1.0
#: Kept back from the budget for the README, collection.json and the pruning, written after the last dump.
RESERVE = 0.5
#: What a dumper killed at its time-out may take beyond it (its grace, the SIGKILL, its output's reader).
KILL_TIME = 2 * dumpers.GRACE + 0.1
#: While gdb dumps follow (they stop the process, and the page with it), the page is waited for only this
#: share of the budget; it is still taken if it comes before the end.
METRICS_SHARE = 0.4

Reader = Callable[[], "bytes | str"]


@dataclass(frozen=True)
class Result:
    path: Path | None
    took: float
    steps: list[tuple[str, str]] = field(default_factory=list)


class _Clock:
    def __init__(self, budget: float):
        self.start, self.budget = time.monotonic(), budget

    def took(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        """What the steps may still spend: the budget less what the end of the collection needs."""
        return self.budget - self.took() - RESERVE


class _Page:
    """The /metrics page, read once by `reader` in a thread of its own: a reader that hangs costs only the wait."""

    def __init__(self, reader: Reader | None):
        self.reader, self.error = reader, ""
        self.page: bytes | str | None = None
        self.thread = threading.Thread(target=self._read, daemon=True) if reader else None
        if self.thread:
            self.thread.start()

    def _read(self) -> None:
        assert self.reader is not None
        try:
            self.page = self.reader()
        except Exception as exc:  # noqa: BLE001  (whatever the reader raises is the step's outcome)
            self.error = f"{type(exc).__name__}: {exc}"

    def wait(self, timeout: float) -> bool:
        if self.thread:
            self.thread.join(max(timeout, 0.0))
        return self.thread is None or not self.thread.is_alive()


def _step(steps: list[tuple[str, str]], name: str, run: Callable[[], str]) -> None:
    """Run one step; whatever it raises is its outcome, never the collection's end."""
    try:
        steps.append((name, run()))
    except Exception as exc:  # noqa: BLE001
        steps.append((name, f"failed: {type(exc).__name__}: {exc}"[:300]))


def _cut(note: str) -> str:
    return f" ({note})" if note else ""


def _processes(bundle: Bundle, family: Sequence[procfs.Proc], asked: Sequence[int], why_none: str = "") -> str:
    if not asked:
        return f"none dumped: {why_none or 'no process named'}"
    if not family:
        return f"none of the processes {list(asked)} is alive"
    note = bundle.write("tree.txt", procfs.tree(family))
    for p in family:
        note = bundle.write(f"proc-{p.pid}.txt", procfs.describe(p)) or note
    gone = [pid for pid in asked if pid not in {p.pid for p in family}]
    return f"ok: {len(family)} processes{f', gone: {gone}' if gone else ''}" + _cut(note)


def _versions(bundle: Bundle, family: Sequence[procfs.Proc], page: _Page, clock: _Clock) -> str:
    """versions.txt, with the server's own word when it came within what is left."""
    got = page.page if page.wait(min(clock.left(), VERSION_WAIT)) and not page.error else None
    said = (got.decode("utf-8", "replace") if isinstance(got, bytes) else got or "").strip()
    return "ok" + _cut(bundle.write("versions.txt", versions.text(family, said)))


def _engine_dumps(bundle: Bundle, family: Sequence[procfs.Proc]) -> str:
    """The stack dumps the engine wrote itself (vLLM's watchdog files, SGLang's logged py-spy dump)."""
    from check_vllm.postmortem import engine_dumps

    files, said = engine_dumps.collect(family)
    cuts = [f"{name} {cut}" for name, data in files if (cut := bundle.write(name, data))]
    return said + _cut("; ".join(cuts))


def _dump(bundle: Bundle, dump: stacks.Dump, clock: _Clock, after: int) -> str:
    """One dumper, with its share of what is left (`after`: the dumps still to run after it)."""
    from check_vllm.postmortem import attach  # as whom a dumper runs, and its process never left stopped

    if dump.argv is None:
        return dump.why_not
    timeout = min(dump.cap, clock.left() / (after + 1)) - KILL_TIME - (attach.RESUME_TIME if dump.pid else 0.0)
    if timeout < 0.2:
        return "skipped: the budget was spent"
    ran = _run(dump, timeout)
    said = ran.outcome
    if ran.ok and any(w.encode() in ran.output for w in dump.fails_on):
        said = f"failed{ran.outcome.removeprefix('ok')}: {dumpers.why(ran.output, dump.fails_on)}"
    from check_vllm.postmortem import refusal  # why the kernel refused it, and the setting that allows it

    pid = refusal.pid_of(dump.argv)
    if not said.startswith("ok") and pid is not None and (refused := refusal.explain(ran.output, pid)):
        said = f"{said}; {refused}"
    return said + (_cut(bundle.write(dump.file, ran.output)) if ran.output else "")


def _run(dump: stacks.Dump, timeout: float) -> dumpers.Ran:
    """Run a dumper, again while it fails with words that mean a racy read and its own time is not spent; the
    outcome says how many runs it took. Each run as attach.run has it: as whom, and the process resumed."""
    from check_vllm.postmortem import attach

    deadline = time.monotonic() + timeout
    ran = attach.run(dump, timeout)
    tries = 1
    while (not ran.ok and tries < dump.tries and any(w.encode() in ran.output for w in dump.retry_on)
           and deadline - time.monotonic() > 0.2):
        ran = attach.run(dump, deadline - time.monotonic())
        tries += 1
    if tries == 1:
        return ran
    return dumpers.Ran(ran.output, f"{ran.outcome} (run {tries} of {dump.tries}: the earlier ones read the "
                                   f"process while it changed)", ran.ok)


def _metrics(bundle: Bundle, page: _Page, wait: float) -> str | None:
    """The page's step outcome, or None while it is still being read."""
    if page.reader is None:
        return "not read: no reader given"
    if not page.wait(wait):
        return None
    if page.error:
        return f"failed: {page.error}"[:300]
    raw = page.page.encode("utf-8", "replace") if isinstance(page.page, str) else bytes(page.page or b"")
    cut = f"cut to {METRICS_MAX} of {len(raw)} bytes" if len(raw) > METRICS_MAX else ""
    return f"ok: {len(raw)} bytes" + _cut(bundle.write("metrics.txt", raw[:METRICS_MAX]) or cut)


def _take(bundle: Bundle, clock: _Clock, family: Sequence[procfs.Proc], page: _Page,
          tools: Tools, steps: list[tuple[str, str]]) -> None:
    """The dumps, phase by phase, and the page waited for between the first phase and the ones that stop."""
    plan = stacks.plan(family, tools)
    runs = [d for d in plan if d.argv is not None]
    metrics: str | None = None
    for dump in plan:
        if metrics is None and dump.phase > stacks.FIRST:
            stopping = any(d.phase > stacks.FIRST for d in runs)
            wait = min(clock.left(), max(METRICS_SHARE * clock.budget - clock.took(), 0.0)) if stopping \
                else clock.left()
            metrics = _metrics(bundle, page, wait)
            if metrics is not None:
                steps.append(("metrics", metrics))
        after = len(runs[runs.index(dump) + 1:]) if dump in runs else 0
        _step(steps, dump.step, functools.partial(_dump, bundle, dump, clock, after))
    if metrics is None:
        late = _metrics(bundle, page, clock.left())
        steps.append(("metrics", late or f"timed out: no page within {clock.took():.1f} s"))


def collect(where: Path, pids: list[int], url_reader: Reader | None, evidence: Mapping[str, object],
            budget: float = 20.0, keep: int = KEEP, max_bytes: int = MAX_BYTES,
            tools: Tools | None = None, server: str = "", secrets: Sequence[str] = (),
            version_reader: Reader | None = None) -> Result:
    """Take the post-mortem of the server whose processes are `pids` (its API server first) into a new bundle
    under `where` (in the server's own directory there, `server`); return within `budget` seconds whatever the
    tools or the server do. `max_bytes` caps the whole of `where`, all servers' bundles together. Every file is
    masked of `secrets` (the check's API key, the URL's password) and of those the processes were given.
    `version_reader`: the server's own word on its version (check_vllm.postmortem.versions), read in a thread."""
    from check_vllm.postmortem.mask import Secrets

    clock = _Clock(budget)
    try:
        bundle = Bundle.create(Path(where), pids[0] if pids else os.getpid(), max_bytes, server=server)
    except (BundleRefused, OSError) as exc:
        return Result(None, clock.took(), [("bundle", f"not made: {exc}")])
    page, said = _Page(url_reader), _Page(version_reader)
    steps: list[tuple[str, str]] = []
    family = procfs.family(pids)
    bundle.mask = Secrets.of(family, secrets).scrub  # every file, from the first: the bundle may go public
    _step(steps, "evidence", lambda: "ok" + _cut(bundle.write_json("evidence.json", dict(evidence))))
    _step(steps, "processes", lambda: _processes(bundle, family, pids, str(evidence.get("no_process") or "")))
    _step(steps, "engine dumps", lambda: _engine_dumps(bundle, family))
    _take(bundle, clock, family, page, tools or dumpers.find(), steps)
    _step(steps, "versions", lambda: _versions(bundle, family, said, clock))
    _finish(bundle, clock, steps, evidence, family)
    retention.prune(bundle.parent, keep, max_bytes)
    if server:
        retention.cap(bundle.parent.parent, max_bytes)
    return Result(bundle.path, clock.took(), steps)


def _finish(bundle: Bundle, clock: _Clock, steps: list[tuple[str, str]], evidence: Mapping[str, object],
            family: Sequence[procfs.Proc]) -> None:
    """collection.json and README.txt: written last, from what the steps said."""
    took = clock.took()
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    said = {"bundle": bundle.path.name, "when": when, "budget": clock.budget, "took": round(took, 3),
            "processes": [{"pid": p.pid, "ppid": p.ppid, "comm": p.comm, "state": p.state} for p in family],
            "steps": [{"step": s, "outcome": o} for s, o in steps],
            "summary": readme.summary(evidence, steps, took)}
    bundle.write_json("collection.json", said, last=True)
    files = list(bundle.files)
    bundle.write("README.txt", readme.text(bundle.path.name, when, platform.node(), files, steps, took,
                                           clock.budget), last=True)
