"""`python -m check_vllm.netdata UPDATE_EVERY`: the process Netdata runs as vllm.plugin.

The contract with Netdata: argv[1] is update_every; stdout carries only the protocol, flushed every
tick; a vLLM server being down is a chart value, never an exit; DISABLE only when vllm.conf holds no
job that could ever work; SIGTERM or a closed pipe ends the plugin with exit 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

from check_vllm.contract.safe_text import without_userinfo

from . import collector
from .config import config_path, load_file

USAGE = """usage: vllm.plugin [UPDATE_EVERY]

Netdata external plugin for vLLM servers (check_vllm). Netdata starts it with its update_every in
seconds; jobs come from $NETDATA_USER_CONFIG_DIR/vllm.conf (default /etc/netdata/vllm.conf).
"""


def _update_every(argv: list[str]) -> int:
    if not argv:
        return 1
    try:
        return max(int(argv[0]), 1)
    except ValueError:
        collector.log(f"update_every {argv[0]!r} is not a number; using 1")
        return 1


def _quiet_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's final flush cannot raise on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    every = _update_every(argv)
    path = config_path()
    try:
        jobs, problems = load_file(path, every)
    except Exception as err:  # a bug in reading the file must read as a message, not a traceback and no DISABLE
        jobs, problems = [], [f"cannot load: {err.__class__.__name__}: {err}"]
    for problem in problems:
        collector.log(f"{path}: {problem}")
    if not jobs:
        collector.log(f"no usable job in {path}: disabled until Netdata restarts")
        sys.stdout.write("DISABLE\n")
        sys.stdout.flush()
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    collector.log(f"{len(jobs)} job(s): {', '.join(f'{j.name} ({without_userinfo(j.url)}, every {j.update_every} s)' for j in jobs)}")
    collector.start(jobs, collector.Output(sys.stdout), stop)
    while not stop.wait(1.0):
        pass
    _quiet_stdout()
    return 0


if __name__ == "__main__":
    sys.exit(main())
