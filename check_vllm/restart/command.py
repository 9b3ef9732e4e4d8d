"""Running the restart command: wait for its exit status, never for its output to close.

A restart command may leave the new server running in the background (`nohup vllm serve ... &`);
that child inherits the command's stdout. Waiting for EOF on a pipe would then wait for the server
to exit, and a timeout would kill the process group, which now holds the new server. So the output
goes to a file (kept beside the state, so what a background server goes on writing stays visible,
and no closed pipe can kill it with SIGPIPE), the command's own exit is what is waited for, and only
a command that is itself still running at the timeout has its process group killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from check_vllm.memory import statedir

#: Bytes read back from the end of the output for the last line the log quotes.
TAIL_BYTES = 8192


def _fresh(path: Path) -> int:
    """A new 0600 output file at `path` (the last run's, or a planted symlink, is replaced, not reused:
    a server left running by that run keeps writing to its own, now unlinked, file)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    statedir.hand_over(fd, path.parent)
    return fd


def _last_line(path: Path, size: int) -> str:
    """The last non-blank line of the first `size` bytes: what the command wrote before it exited, not
    what a server it left running wrote since."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, size - TAIL_BYTES))
            raw = fh.read(max(0, min(size, TAIL_BYTES)))
    except OSError:
        return ""
    lines = [ln for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1].strip()[:200] if lines else ""


def run_command(argv: list[str], timeout: float, output: Path) -> tuple[int | None, str]:
    """Run the restart command (no shell), its output to `output`. Returns (exit code, or None when it
    timed out and was killed; its last output line). Returns when the command exits, whatever it left
    running in the background; only a command still running after `timeout` is killed, with its group."""
    try:
        out = _fresh(output)
    except OSError as err:
        return 127, f"cannot write its output to {output}: {err.strerror}"
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    except OSError as err:
        return 127, f"cannot run {argv[0]!r}: {err.strerror}"
    finally:
        os.close(out)
    try:
        rc: int | None = proc.wait(timeout=timeout)
        tail = ""
    except subprocess.TimeoutExpired:
        rc = proc.poll()  # it may have exited at the deadline: then what it left running is left alone
        tail = ""
    if rc is None:
        # Not yet reaped, so its process group id cannot have been reused: the kill reaches only its own.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        tail = f"timed out after {timeout:g} s and was killed"
    try:
        size = os.stat(output).st_size
    except OSError:
        size = 0
    return rc, tail or _last_line(output, size)
