"""The handler's own look at the server's process before it acts on "down" or "unresponsive".

The check's verdict may be older than a start or a stop it could not see yet (an operator's
`supervisorctl restart`, a deploy, a boot a minute ago): the handler asks the host itself, as the check
does, and judges the answer with the check's own judge, so the two never disagree on what "starting" or
"stopping" means. Whatever that judge calls not restartable, the handler leaves alone.
"""

from __future__ import annotations

from typing import Any

from check_vllm.contract.values import Failure, Instant, Memory
from check_vllm.contract.vocab import DOWN, RESTARTABLE, UNRESPONSIVE, Settings


def still_loading(url: str, memory: Memory, word: str, settings: Settings, pid_file: str | None,
                  pid_command: str | None, marker: Instant | None) -> str | None:
    """Why not to restart: the server's process is starting or stopping (a sentence), or None."""
    if word not in (DOWN, UNRESPONSIVE):
        return None
    from check_vllm.judge.silence import assess_failure
    from check_vllm.server import clock, host

    witness = host.witness(url, pid_file, pid_command)
    if witness is None or (witness.process is None and memory.stopping is None):
        return None
    verdict = assess_failure(memory, Failure(word, "as the check last saw it"), settings, clock.now(), marker,
                             witness)
    return None if verdict.word in RESTARTABLE else f"{verdict.word}: {verdict.text}"


def options(group: Any, defaults: Settings) -> None:
    """The check's own process options, given to the handler with the same values."""
    from check_vllm.nagios.args import number

    group.add_argument("--start-grace", type=number(float), default=defaults.start_grace, metavar="S",
                       help="the check's --start-grace: a server process younger than S s that has not served "
                            "yet is starting, never restarted (default %(default)g)")
    group.add_argument("--stop-grace", type=number(float), default=defaults.stop_grace, metavar="S",
                       help="the check's --stop-grace: a live process that served and refuses connections for "
                            "less than S s is stopping, never restarted (default %(default)g)")
    group.add_argument("--pid-file", metavar="FILE", help="the check's --pid-file")
    group.add_argument("--pid-command", metavar="CMD", help="the check's --pid-command")
