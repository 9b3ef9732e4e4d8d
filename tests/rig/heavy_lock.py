"""One real vLLM at a time on this machine: an exclusive flock on /tmp/check_vllm-heavy.lock.

Every tier that starts a real vLLM (real-vllm, real-vllm-matrix, incident, the bench's real figures)
takes it for as long as its servers live, so two of them never starve each other (and everything
else) on 2 cores. This is the one implementation they share. People and CI also run whole tiers under
`flock /tmp/check_vllm-heavy.lock tox -e incident`: then the lock is already held by an ANCESTOR of
this process (flock(1) holds it while its command runs), and taking it again would wait for
ourselves forever. /proc/locks names the process that holds it; if that is one of our ancestors we
are inside its lock already and go ahead.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

HEAVY_LOCK = Path("/tmp/check_vllm-heavy.lock")


def _ppid(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rfind(")") + 2:].split()[1])


def ancestors(pid: int | None = None) -> list[int]:
    out, pid = [], os.getpid() if pid is None else pid
    while pid and pid > 1:
        pid = _ppid(pid)
        if pid:
            out.append(pid)
    return out


def holders(path: Path) -> list[int]:
    """PIDs /proc/locks names for an flock on `path` (by device and inode)."""
    try:
        st = path.stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in text.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 11601 fe:00:16040971 0 EOF" (blocked waiters have "->" after the number)
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue
        if parts[5] == want:
            pids.append(int(parts[4]))
    return pids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


class HeavyLock:
    """Context manager: hold the machine's heavy lock (or find an ancestor holding it)."""

    def __init__(self, path: Path = HEAVY_LOCK, timeout: float = 3600.0, say=print) -> None:
        self.path = path
        self.timeout = timeout
        self.say = say
        self.fd: int | None = None
        self.how = ""
        self.waited = 0.0

    def take(self) -> bool:
        """Hold the lock (or find an ancestor holding it); False if neither within the timeout."""
        t0 = time.monotonic()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                self.how = f"taken by this process ({os.getpid()})"
                break
            except BlockingIOError:
                pass
            mine = [p for p in holders(self.path) if p in ancestors()]
            if mine:
                os.close(fd)
                self.how = f"held by ancestor {mine[0]} ({_cmdline(mine[0])[:80]})"
                break
            if not told:
                held = ", ".join(f"{p} ({_cmdline(p)[:80]})" for p in holders(self.path)) or "?"
                self.say(f"waiting for {self.path}: another real-vLLM run holds it: {held}")
                told = True
            if time.monotonic() - t0 > self.timeout:
                os.close(fd)
                return False
            time.sleep(2.0)
        self.waited = time.monotonic() - t0
        return True

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> HeavyLock:
        if not self.take():
            raise TimeoutError(f"{self.path} still held after {self.timeout:g} s")
        return self

    def __exit__(self, *exc) -> None:
        self.release()
