"""The handler's own look at the server's process before it acts on "down" or "unresponsive".

The check's verdict may be older than a start it could not see yet (an operator's `supervisorctl restart`,
a deploy, a boot a minute ago): the handler asks the host itself, as the check does, and judges the
answer with the check's own judge, so the two never disagree on what "starting" means.
"""

from __future__ import annotations

from typing import Any

from check_vllm.contract.values import Failure, Memory
from check_vllm.contract.vocab import DOWN, STARTING, UNRESPONSIVE, Settings


def still_loading(url: str, memory: Memory, word: str, start_grace: float, pid_file: str | None,
                  pid_command: str | None, marker: float | None) -> str | None:
    """Why not to restart: the server's process is starting (a sentence), or None."""
    if word not in (DOWN, UNRESPONSIVE):
        return None
    from check_vllm.judge.silence import assess_failure
    from check_vllm.server import clock, host

    witness = host.witness(url, pid_file, pid_command)
    if witness is None or witness.process is None:
        return None
    verdict = assess_failure(memory, Failure(word, "as the check last saw it"), Settings(start_grace=start_grace),
                             clock.now(), marker, witness)
    return f"{STARTING}: {verdict.text}" if verdict.word == STARTING else None


def options(group: Any, default_grace: float) -> None:
    """The check's own process options, given to the handler with the same values."""
    from check_vllm.nagios.args import number

    group.add_argument("--start-grace", type=number(float), default=default_grace, metavar="S",
                       help="the check's --start-grace: a server process younger than S s that has not served "
                            "yet is starting, never restarted (default %(default)g)")
    group.add_argument("--pid-file", metavar="FILE", help="the check's --pid-file")
    group.add_argument("--pid-command", metavar="CMD", help="the check's --pid-command")
