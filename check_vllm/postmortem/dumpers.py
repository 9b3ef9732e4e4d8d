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
from typing import Any

#: What a dumper may say before the rest is dropped (a gdb backtrace of hundreds of threads is ~1 MB).
OUTPUT_MAX = 4 << 20
#: Between the polite signal (SIGTERM: a dumper may clean up) and SIGKILL.
GRACE = 0.25


@dataclass(frozen=True)
class Tools:
    """Paths of the dumpers; None where one is not installed, or `skipped` says why the one found was not taken
    ((name, why) pairs)."""
    py_spy: str | None = None
    gdb: str | None = None
    nvidia_smi: str | None = None
    skipped: tuple[tuple[str, str], ...] = ()

    def why_skipped(self, name: str) -> str:
        return next((why for tool, why in self.skipped if tool == name), "")


def _chain(path: str) -> list[str]:
    """`path` and every directory above it, up to /."""
    out = [path]
    while (up := os.path.dirname(out[-1])) != out[-1]:
        out.append(up)
    return out


def untrusted(path: str) -> str:
    """Why root must not run `path` ("" when it may): the file, or a directory above it (as named and as
    resolved), owned by another user or open to others' writes (a directory without the sticky bit), lets them
    choose what root runs."""
    for each in dict.fromkeys(_chain(os.path.abspath(path)) + _chain(os.path.realpath(path))):
        try:
            st = os.lstat(each)
        except OSError as exc:
            return f"{each}: {exc.strerror}"
        if st.st_uid != 0:
            return f"{each} is owned by uid {st.st_uid}, not root"
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022 and not sticky:
            return f"{each} may be written by {'others' if st.st_mode & 0o002 else 'its group'}"
    return ""


def _which(name: str) -> tuple[str | None, str]:
    """On PATH, or beside this interpreter (a venv's bin, where `pip install py-spy` puts it): the first regular
    file of that name with an execute bit, and why others were skipped. Not shutil.which: access(2) drops a
    non-root user's capabilities, so a tool reached through a directory only CAP_DAC_READ_SEARCH may search would
    be missed, though execve runs it. As root, only a file root alone could have put there (`untrusted`)."""
    dirs = [*filter(None, os.environ.get("PATH", os.defpath).split(os.pathsep)), os.path.dirname(sys.executable)]
    skipped = ""
    for where in dirs:
        path = os.path.join(where, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not (stat.S_ISREG(st.st_mode) and st.st_mode & 0o111):
            continue
        if os.geteuid() == 0 and (why := untrusted(path)):
            skipped = skipped or f"{path} not run: {why} (a root handler runs only what root alone may change)"
            continue
        return path, ""
    return None, skipped


def find() -> Tools:
    found = {name: _which(name) for name in ("py-spy", "gdb", "nvidia-smi")}
    return Tools(found["py-spy"][0], found["gdb"][0], found["nvidia-smi"][0],
                 tuple((name, why) for name, (path, why) in found.items() if path is None and why))


#: How to get each dumper, for the step that finds it missing.
INSTALL = {"py-spy": "pip install py-spy (or check_vllm[postmortem])", "gdb": "apt-get install gdb"}


@dataclass(frozen=True)
class Ran:
    """A dumper's output (stdout and stderr, bounded) and how its run ended, in the step's words."""
    output: bytes
    outcome: str
    ok: bool
    #: It could not start for lack of a permission (the tool beyond a directory its user may not enter).
    denied: bool = False
    #: It ran out of time and was killed.
    killed: bool = False


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


def run(argv: list[str], timeout: float, user: tuple[int, int] | None = None, polite: bool = True) -> Ran:
    """Run `argv` for at most `timeout` seconds (+ GRACE when it must be killed): its own session and process
    group, so a child it started dies with it; its output is read by a thread, never waited on. `user`: the
    (uid, gid) it runs as, with no other group, and the outcome says so; `polite`: SIGTERM before SIGKILL at the
    time-out."""
    started = time.monotonic()
    env = dict(os.environ, DEBUGINFOD_URLS="", LC_ALL="C")
    ids: dict[str, Any] = {} if user is None else {"user": user[0], "group": user[1], "extra_groups": [], "cwd": "/"}
    who = "" if user is None else f" as {'root' if user[0] == 0 else f'uid {user[0]}'}"
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env, **ids)
    except OSError as exc:
        return Ran(b"", f"could not start{who}: {exc.strerror or exc}", False, isinstance(exc, PermissionError))
    out = bytearray()
    reader = threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(timeout, 0.0))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc, signal.SIGTERM if polite else signal.SIGKILL)
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
        return Ran(bytes(out), f"timed out after {took:.1f} s{who} (its process group killed)", False, killed=True)
    if rc != 0:
        return Ran(bytes(out), f"failed (exit {rc}) in {took:.1f} s{who}: {why(bytes(out))}", False)
    return Ran(bytes(out), f"ok in {took:.1f} s{who}", True)
