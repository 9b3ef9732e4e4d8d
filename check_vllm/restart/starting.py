"""The handler's own look at the server's process before it acts on "down" or "unresponsive".

The check's verdict may be older than a start or a stop it could not see yet (an operator's
`supervisorctl restart`, a deploy, a boot a minute ago): the handler asks the host itself, as the check
does, through the check's own door for a run without a reading (check_vllm.judge.no_reading), so the two
never disagree on what "starting" or "stopping" means. Whatever that judge calls not restartable, the
handler leaves alone; an engine its API server called dead stays down whatever the host shows.
"""

from __future__ import annotations

from collections.abc import Callable

from check_vllm.contract.defaults import Options, Settings
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import Evidence, Failure
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import DOWN, RESTARTABLE, UNRESPONSIVE
from check_vllm.machine import clock


def still_loading(url: str, memory: Memory, word: str, settings: Settings, options: Options,
                  marker: Instant | None) -> str | None:
    """Why not to restart: the server's process is starting or stopping (a sentence), or None."""
    if word not in (DOWN, UNRESPONSIVE):
        return None
    verdict = own_look(url, memory, settings, options, marker)
    return None if verdict is None or verdict.word in RESTARTABLE else f"{verdict.word}: {verdict.text}"


def own_look(url: str, memory: Memory, settings: Settings, options: Options, marker: Instant | None,
             now: Callable[[], Instant | float] = clock.now) -> Verdict | None:
    """The restart handler's own look before it acts on a saved down or unresponsive verdict: what the host sees
    of the server's process now, judged by the one judge of a run without a reading, as a second look (it
    never asks for another). None when the host adds nothing: no witness, or no process and no stop seen."""
    from check_vllm.judge.no_reading import assess_failure, engine_died_last
    from check_vllm.server import host

    last = memory.last
    if last is None:
        return None
    failure = Failure(last.word, "as the check last saw it", dead_engine=engine_died_last(memory))
    witness = None if failure.dead_engine else host.witness(url, options)
    if not failure.dead_engine and (witness is None or (witness.process is None and memory.stopping is None)):
        return None
    return assess_failure(memory, Evidence(failure, witness, marker, True), settings, now())
