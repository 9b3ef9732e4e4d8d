"""`check_vllm_restart --status`: the handler's decision as a check, for the restart service.

Icinga 2 and Nagios call an event handler on SOFT results and on HARD state CHANGES only. A service that
is already HARD CRITICAL for another reason (a --kv-critical threshold) when the engine freezes never
calls it again, nor does one whose restart the cooldown refused. A service whose state is the handler's
own decision changes exactly when a restart becomes due: OK (nothing to restart), WARNING (a restart is
held back by the cooldown, the circuit breaker, a downtime...), CRITICAL (due now). Its event handler is
then called at that moment and decides the same way, because both run `weigh`. Given the main service's
state type (`--state-type`), a restart due while that is SOFT is held back: its max_check_attempts confirms
a problem for the restart service too. It reads only local files (and /proc; with a fleet budget,
Prometheus while a restart is due): it costs the vLLM server nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from check_vllm.cli import statusline
from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, OK, UNKNOWN, WARNING
from check_vllm.memory.door import Door
from check_vllm.restart.policy import Decision, Event, screen

LABEL = "VLLM_RESTART"


def report(event: Event, door: Callable[[], Door], weigh: Callable[[Event, Door], Decision],
           last_bundle: Callable[[Door], str] = lambda store: "") -> int:
    """Print one plugin line for the decision the handler would take now (`weigh`, on the store `door` opens,
    locked as the handler locks it), naming the last post-mortem (`last_bundle`); return its exit code."""
    # weighed as if the main service were CRITICAL HARD; what it really is holds a due restart back below
    main, soft = event.service_state, event.state_type != "HARD"
    event = replace(event, service_state="CRITICAL", state_type="HARD")
    early = screen(event)
    if early is not None:  # a downtime or an acknowledgement holds any restart back
        return _say(WARNING, f"held back: {early.why}")
    with door() as store:
        if store.busy:
            return _say(OK, "a restart decision is being made right now")
        if store.refused:
            return _say(UNKNOWN, store.refused)
        if store.unlocked:
            return _say(UNKNOWN, f"cannot read the restart history: {store.unlocked}")
        decision, aside = weigh(event, store), last_bundle(store)
    if decision.act and main != "CRITICAL":  # the check wrote its verdict before the scheduler took its result in
        return _say(WARNING, f"held back: the main service is still {main}, a restart waits for its CRITICAL HARD "
                             f"state ({decision.why}){aside}")
    if decision.act and soft:  # the main service's max_check_attempts is a guard too: it confirms the problem
        attempt = f", attempt {event.attempt}" if event.attempt is not None else ""
        return _say(WARNING, f"held back: the main service is CRITICAL SOFT{attempt}, a restart waits for its HARD "
                             f"state ({decision.why}){aside}")
    if decision.act:
        return _say(CRITICAL, f"due: {decision.why}{aside}")
    if decision.kind == "refuse":
        return _say(WARNING, f"held back: {decision.why}{aside}")
    return _say(OK, f"nothing to restart: {decision.why}{aside}")


def _say(code: int, text: str) -> int:
    print(f"{LABEL} {CODE_NAMES[code]} - {statusline.fit(text)}")
    return code
