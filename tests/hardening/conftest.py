"""The hardening tests' strict way to run the installed check and the handler (their servers are tests/rig/loopback.py's)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.rig.loopback import (  # noqa: F401  (the tests of this folder take them from here)
    MODEL,
    Answer,
    Loopback,
    RawServer,
    Seen,
    answer,
    completion_answer,
    gzip_bomb,
    metrics_from,
    models_answer,
    read_request,
    sim_page,
)
from tests.rig.scripts import FAST, Result, script, zygote

CHECK = script("check_vllm")
RESTART = script("check_vllm_restart")

__all__ = ["CHECK", "FAST", "Loopback", "Outcome", "RawServer", "sane", "sim_page"]

from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING  # noqa: E402  (one owner for the codes)

STATUS = re.compile(r"^VLLM (OK|WARNING|CRITICAL|UNKNOWN) - \S")
#: Far more than any honest status line; bounds what one run may print.
MAX_OUTPUT = 4096
#: Peak RSS a check run may reach, whatever the server sends (a normal run is ~50 MB; a capped 8 MiB body adds ~20).
MAX_RSS_KB = 100 * 1024



@dataclass
class Outcome(Result):
    """A check run: exit code, stdout, stderr, wall time and peak RSS of the check process."""

    seconds: float = 0.0
    rss_kb: int = 0


def sane(r: Outcome) -> Outcome:
    """What every run must satisfy, whatever it was fed: one status line, a plugin exit code,
    valid perfdata, no traceback anywhere, bounded output and memory."""
    assert r.code in (OK, WARNING, CRITICAL, UNKNOWN), (r.code, r.out, r.err)
    assert STATUS.match(r.first), f"not a plugin status line: {r.out!r} / {r.err!r}"
    assert "Traceback" not in r.out and "Traceback" not in r.err, r.err
    assert len(r.out) < MAX_OUTPUT, f"{len(r.out)} bytes of output"
    assert r.rss_kb < MAX_RSS_KB, f"peak RSS {r.rss_kb} KiB"
    r.perf  # noqa: B018 - validates every perfdata item
    for bad in ("nan", "inf", "e+", "e-"):
        assert bad not in r.first.split(" | ")[-1].lower() or " | " not in r.first, r.first
    return r


@pytest.fixture
def check(tmp_path: Path) -> Callable[..., Outcome]:
    """Run the installed console script like a scheduler does, and vet the result with `sane`."""
    assert CHECK, "check_vllm is not installed (pip install -e .)"
    state = tmp_path / "state"

    def run(*args: str, env: dict[str, str] | None = None, state_dir: Path | None = state,
            vet: bool = True, prefix: tuple[str, ...] = ()) -> Outcome:
        argv = [*prefix, CHECK, *(("--state-dir", str(state_dir)) if state_dir is not None else ()), *args]
        started = time.monotonic()
        code, out, err, rss = spawn(argv, env={**os.environ, **(env or {})})
        r = Outcome(code, out, err, seconds=time.monotonic() - started, rss_kb=rss)
        return sane(r) if vet else r

    return run


#: The spawner of a measured run (see spawn): exec the run, wait, write its peak RSS (KiB), leave with its end.
SPAWNER = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def spawn(argv: list[str], env: dict[str, str], limit: float = 90.0) -> tuple[int, str, str, int]:
    """Run to completion; exit code, stdout, stderr and the peak RSS (KiB) of that very process (wait4). A run
    of the check or the handler itself is forked from the rig's warm zygote (its peak RSS then counts the
    zygote's pages too, an upper bound); a run under a prefix, or one the zygote cannot stand in for, is
    spawned from the installed script."""
    name = {CHECK: "check_vllm", RESTART: "check_vllm_restart"}.get(argv[0])
    try:
        forked = zygote().run(name, argv[1:], env, limit) if name else None
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{argv} did not finish in {limit:g} s") from None
    if forked is not None:
        return forked.code, forked.out, forked.err, forked.rss_kb
    # The run's peak RSS is counted from its exec: the kernel records the memory it exec'd FROM as the process's
    # peak (exec_mmap's setmax_mm_hiwater_rss), and a child of this test process (fork, vfork or posix_spawn
    # alike) would report this worker's own peak, which grows with every test it ran (-n 2 read 117 MB). So a
    # small spawner, started fresh, execs the run and reports its rusage; it dies with the run's signal.
    report = tempfile.NamedTemporaryFile(prefix="rusage-", delete=False)
    report.close()
    proc = subprocess.Popen([sys.executable, "-I", "-c", SPAWNER, report.name, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    chunks: dict[str, bytes] = {}

    def drain(name: str, stream: Any) -> None:
        chunks[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(n, s), daemon=True)
               for n, s in (("out", proc.stdout), ("err", proc.stderr))]
    for t in readers:
        t.start()
    timer = threading.Timer(limit, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        _, status, _ = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    rss = int(Path(report.name).read_text() or 0)
    os.unlink(report.name)
    proc.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join()
    assert proc.returncode != -9, f"{argv} did not finish in {limit:g} s"
    return (proc.returncode, chunks["out"].decode(errors="replace"), chunks["err"].decode(errors="replace"),
            rss)


# --------------------------------------------------------------------------- a vLLM page factory


def has(tool: str) -> bool:
    return shutil.which(tool) is not None


# --------------------------------------------------------------------------- the restart handler, run strictly

@dataclass
class Handled:
    """A check_vllm_restart call: exit code, stdout (its decision line), stderr, and how often the command ran."""

    code: int
    out: str
    err: str
    restarts: int

    @property
    def line(self) -> str:
        return self.out.rstrip("\n")


@pytest.fixture
def restart(tmp_path: Path) -> Callable[..., Handled]:
    """Run the installed handler like an event handler does, with a command that only counts its runs.
    Whatever it was fed: no traceback, exactly one decision line on stdout."""
    assert RESTART, "check_vllm_restart is not installed (pip install -e .)"
    counter = tmp_path / "restarts.txt"
    command = [sys.executable, "-c", f"open({str(counter)!r}, 'a').write('restart\\n')"]

    def run(url: str, *extra: str, state: str = "CRITICAL", state_type: str = "HARD",
            state_dir: Path | None = None, env: dict[str, str] | None = None) -> Handled:
        argv = [RESTART, "--state", state, "--state-type", state_type, "--attempt", "3", "--url", url,
                "--state-dir", str(state_dir or tmp_path / "state"), *extra, "--", *command]
        code, out, err, _ = spawn(argv, env={**os.environ, **(env or {})})
        assert "Traceback" not in out and "Traceback" not in err, err
        assert len(out.splitlines()) == 1 and out.endswith("\n"), f"not one decision line: {out!r} / {err!r}"
        runs = len(counter.read_text().splitlines()) if counter.exists() else 0
        return Handled(code, out, err, runs)

    return run
