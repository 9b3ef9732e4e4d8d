"""A console script's run without the interpreter's start-up: a warm process that forks one child per run.

Where a test's subject is what the check decides, not how Python starts, most of an installed script's run is
the interpreter and its imports (~0.2 s of CPU, the fast suite's largest cost). The zygote is started once per
test process, imports the product once, and forks a fresh child for each run: the child gets the run's argv,
environment, working directory, /dev/null on stdin and files on stdout and stderr, calls the script's entry point
as the installed script does, and exits with its code. Each run is still its own process (its own signals, its
own nagiosplugin Runtime, its own state-file lock), so a run reads exactly as the installed script's would.

What differs is only the start: a run whose environment changes how Python itself starts (PYTHON*, the locale)
is not forked here, and neither are concurrent runs; `run` answers None for those and the caller executes the
installed script instead (tests/rig/scripts.py).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import NamedTuple


def _entry_points() -> dict[str, str]:
    """The console scripts a child can run, as the installed distribution declares them (setup.cfg's entry
    points, read back, never restated): script name -> the module whose main() it calls."""
    from importlib.metadata import distribution

    return {ep.name: ep.module for ep in distribution("check-vllm").entry_points
            if ep.group == "console_scripts" and ep.attr == "main"}


ENTRY = _entry_points()
#: What a run imports on its way: imported once in the zygote instead of once a run.
WARM = ("check_vllm.nagios.plugin", "check_vllm.probes.exec_probe", "check_vllm.session", "check_vllm.server.fetch", "check_vllm.observe",
        "check_vllm.restart.status", "httpx", "nagiosplugin")


def _starts_python(name: str) -> bool:
    """Variables read by the interpreter at its start (the encoding of stdout, the locale), not by the check."""
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")


def _child(request: dict, out: int, err: int) -> None:
    """In the forked child: become the run (argv, env, cwd, stdio), call the entry point, exit with its code."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = list(request["argv"])
        module = sys.modules[ENTRY[request["script"]]]
        try:
            returned = module.main()  # the installed script: sys.exit(main())
            code = returned if isinstance(returned, int) else 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            if not isinstance(done.code, (int, type(None))):
                print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _wait(pid: int, timeout: float) -> tuple[int | None, int]:
    """The child's exit code (negative: its signal; None when it outlived `timeout`, then it is killed) and its
    peak RSS in KiB (wait4: the run's own, counted from the zygote's pages it shares)."""
    fd = os.pidfd_open(pid)
    try:
        if not select.select([fd], [], [], timeout)[0]:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None, 0
    finally:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss


def serve() -> None:
    """The zygote's loop: one JSON request a line on fd 0, one JSON answer a line on fd 1 (its own output goes to
    stderr); single-threaded, so forking is safe."""
    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    from check_vllm.nagios import cli

    cli.lean_imports()
    for name in (*ENTRY.values(), *WARM):
        __import__(name)
    answers.write("ready\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            pid = os.fork()
            if pid == 0:
                _child(request, out.fileno(), err.fileno())
            code, rss_kb = _wait(pid, request["timeout"])
            out.seek(0)
            err.seek(0)
            answer = {"code": code, "rss_kb": rss_kb, "out": out.read().decode("utf-8", "replace"),
                      "err": err.read().decode("utf-8", "replace")}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


class Ran(NamedTuple):
    """A forked run: what subprocess.run would report, and the child's peak RSS."""

    code: int
    out: str
    err: str
    rss_kb: int


class Zygote:
    """The test process's side: starts the zygote on first use; one run at a time (a busy zygote says None)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._env = dict(os.environ)

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, env=self._env)
            ready = self._proc.stdout.readline() if self._proc.stdout else ""
            if ready != "ready\n":
                raise RuntimeError(f"the zygote did not start: {ready!r}")
        return self._proc

    def run(self, script: str, argv: list[str], env: dict[str, str], timeout: float) -> Ran | None:
        """The run of `script` with `argv`, or None when this run must be executed instead;
        subprocess.TimeoutExpired past `timeout`, as subprocess.run raises it."""
        starts = {k: v for k, v in env.items() if _starts_python(k)}
        if script not in ENTRY or starts != {k: v for k, v in self._env.items() if _starts_python(k)}:
            return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            proc = self._started()
            assert proc.stdin and proc.stdout
            request = {"script": script, "argv": [script, *argv], "env": env, "cwd": os.getcwd(),
                       "timeout": timeout}
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline())
        finally:
            self._lock.release()
        if answer["code"] is None:
            raise subprocess.TimeoutExpired([script, *argv], timeout, answer["out"], answer["err"])
        return Ran(answer["code"], answer["out"], answer["err"], answer["rss_kb"])


if __name__ == "__main__":
    sys.path.pop(0)  # this folder: the product is imported as the installed script imports it
    serve()
