"""The handler's own look at the server's process before it acts on "down" or "unresponsive".

The check's verdict may be older than a start or a stop it could not see yet (an operator's
`supervisorctl restart`, a deploy, a boot a minute ago): the handler asks the host itself, as the check
does, through the check's own door for a run without a reading (check_vllm.observe.own_look), so the two
never disagree on what "starting" or "stopping" means. Whatever that judge calls not restartable, the
handler leaves alone; an engine its API server called dead stays down whatever the host shows.
"""

from __future__ import annotations

from check_vllm.contract.values import Instant, Memory
from check_vllm.contract.vocab import DOWN, RESTARTABLE, UNRESPONSIVE, Options, Settings


def still_loading(url: str, memory: Memory, word: str, settings: Settings, options: Options,
                  marker: Instant | None) -> str | None:
    """Why not to restart: the server's process is starting or stopping (a sentence), or None."""
    if word not in (DOWN, UNRESPONSIVE):
        return None
    from check_vllm.observe import own_look

    verdict = own_look(url, memory, settings, options, marker)
    return None if verdict is None or verdict.word in RESTARTABLE else f"{verdict.word}: {verdict.text}"
