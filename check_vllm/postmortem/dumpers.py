"""The external dumpers (py-spy, gdb, nvidia-smi): where they are, and each run in a process group of its own
under a time-out, the whole group killed when it runs out. A dumper attached to a hung process can hang
itself; the restart behind the post-mortem must not wait for it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

#: What a dumper may say before the rest is dropped (a gdb backtrace of hundreds of threads is ~1 MB).
OUTPUT_MAX = 4 << 20
#: Between the polite signal (gdb detaches on SIGTERM, so the process it held runs on) and SIGKILL.
GRACE = 0.25


@dataclass(frozen=True)
class Tools:
    """Paths of the dumpers; None where one is not installed."""
    py_spy: str | None = None
    gdb: str | None = None
    nvidia_smi: str | None = None


def _which(name: str) -> str | None:
    """On PATH, or beside this interpreter (a venv's bin, where `pip install py-spy` puts it): the first regular
    file of that name with an execute bit. Not shutil.which: access(2) drops a non-root user's capabilities, so a
    tool reached through a directory only CAP_DAC_READ_SEARCH may search would be missed, though execve runs it."""
    dirs = [*filter(None, os.environ.get("PATH", os.defpath).split(os.pathsep)), os.path.dirname(sys.executable)]
    for where in dirs:
        path = os.path.join(where, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return path
    return None


def find() -> Tools:
    return Tools(_which("py-spy"), _which("gdb"), _which("nvidia-smi"))


#: How to get each dumper, for the step that finds it missing.
INSTALL = {"py-spy": "pip install py-spy (or check_vllm[postmortem])", "gdb": "apt-get install gdb"}


@dataclass(frozen=True)
class Ran:
    """A dumper's output (stdout and stderr, bounded) and how its run ended, in the step's words."""
    output: bytes
    outcome: str
    ok: bool


def _drain(stream, into: bytearray) -> None:
    """Keep the first OUTPUT_MAX bytes, read and drop the rest (a full pipe would hold the dumper)."""
    while chunk := stream.read(65536):
        if len(into) < OUTPUT_MAX:
            into += chunk[:OUTPUT_MAX - len(into)]


def _kill(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass


def why(out: bytes, words: tuple[str, ...] = ("error",)) -> str:
    """The lines of a failed dumper's output that say why: those holding one of `words`, else its first line."""
    lines = [line.strip() for line in out.decode("utf-8", "replace").splitlines() if line.strip()]
    said = [line for line in lines if any(w.lower() in line.lower() for w in words)] or lines[:1] or ["no output"]
    return " ".join(said)[:300]


def run(argv: list[str], timeout: float) -> Ran:
    """Run `argv` for at most `timeout` seconds (+ GRACE when it must be killed): its own session and process
    group, so a child it started dies with it; its output is read by a thread, never waited on."""
    started = time.monotonic()
    env = dict(os.environ, DEBUGINFOD_URLS="", LC_ALL="C")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    except OSError as exc:
        return Ran(b"", f"could not start: {exc.strerror or exc}", False)
    out = bytearray()
    reader = threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(timeout, 0.0))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            _kill(proc, signal.SIGKILL)
            try:  # one in the kernel's uninterruptible sleep (a wedged driver) dies only when it returns
                proc.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                pass
        rc = proc.returncode
    _kill(proc, signal.SIGKILL)  # whatever of its group is left
    reader.join(timeout=0.1)  # a child that left the group may hold the pipe: not waited for
    took = time.monotonic() - started
    if timed_out:
        return Ran(bytes(out), f"timed out after {took:.1f} s (its process group killed)", False)
    if rc != 0:
        return Ran(bytes(out), f"failed (exit {rc}) in {took:.1f} s: {why(bytes(out))}", False)
    return Ran(bytes(out), f"ok in {took:.1f} s", True)
