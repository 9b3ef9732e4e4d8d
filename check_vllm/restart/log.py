"""The handler's one line per call: what it decided and why, on stdout (the scheduler keeps it) and in --log."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from check_vllm.cli import statusline
from check_vllm.contract.safe_text import without_userinfo
from check_vllm.memory import statedir
from check_vllm.restart.options import PROG
from check_vllm.restart.policy import Event


class Logger:
    def __init__(self, url: str, log_file: str | None) -> None:
        self.url = without_userinfo(url.rstrip("/"))  # the log and the scheduler show it: never a password
        self.log_file = log_file

    def __call__(self, decision: str, why: str, event: Event | None = None) -> None:
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        where = f" {event.service_state} {event.state_type}" if event else ""
        if event and event.attempt is not None:
            where += f" attempt {event.attempt}"
        # One line, whatever the state file's verdict text or the command's output held.
        line = statusline.fit(f"{when} {PROG}[{os.getpid()}] {self.url}{where}: {decision}: {why}", 4000, "utf-8",
                              pipe=False)
        line = line.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates from JSON
        print(line, flush=True)
        if self.log_file:
            try:
                fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
                statedir.hand_over(fd, Path(self.log_file).parent)  # root's manual run: still the user's log
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    fh.write(line + "\n")
            except OSError as err:
                print(f"{PROG}: cannot append to --log {self.log_file}: {err.strerror}", file=sys.stderr)
