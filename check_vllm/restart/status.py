"""`check_vllm_restart --status`: the handler's decision as a check, for the restart service.

Icinga 2 and Nagios call an event handler on SOFT results and on HARD state CHANGES only. A service that
is already HARD CRITICAL for another reason (a --kv-critical threshold) when the engine freezes never
calls it again, nor does one whose restart the cooldown refused. A service whose state is the handler's
own decision changes exactly when a restart becomes due: OK (nothing to restart), WARNING (a restart is
held back by the cooldown, the circuit breaker, a downtime...), CRITICAL (due now). Its event handler is
then called at that moment and decides the same way, because both run `weigh`. Given the main service's
state type (`--state-type`), a restart due while that is SOFT is held back: its max_check_attempts confirms
a problem for the restart service too. It reads only local files (and /proc): it costs the vLLM server nothing.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, OK, UNKNOWN, WARNING
from check_vllm.front import statusline
from check_vllm.memory.statefile import StateBusy, StateError, StateRefused, default_dir
from check_vllm.restart.history import history_file
from check_vllm.restart.policy import Event, screen
from check_vllm.server import clock as clocks

LABEL = "VLLM_RESTART"


def report(args: argparse.Namespace, event: Event, weigh: Any, clock: Any = clocks.now) -> int:
    """Print one plugin line for the decision the handler would take now; return its exit code."""
    state_dir = Path(args.state_dir) if args.state_dir else default_dir()
    url = args.url.rstrip("/")
    soft, event = event.state_type != "HARD", replace(event, state_type="HARD")
    early = screen(event)
    if early is not None:  # a downtime or an acknowledgement holds any restart back
        return _say(WARNING, f"held back: {early.why}")
    history = history_file(state_dir, url, args.lock_timeout)
    try:
        history.lock()
    except StateBusy:
        return _say(OK, "a restart decision is being made right now")
    except StateRefused as err:
        return _say(UNKNOWN, str(err))
    except StateError as err:
        return _say(UNKNOWN, f"cannot read the restart history: {err}")
    try:
        decision, _, _ = weigh(args, event, history, state_dir, url, clock())
    finally:
        history.unlock()
    if decision.act and soft:  # the main service's max_check_attempts is a guard too: it confirms the problem
        attempt = f", attempt {event.attempt}" if event.attempt is not None else ""
        return _say(WARNING, f"held back: the main service is CRITICAL SOFT{attempt}, a restart waits for its HARD "
                             f"state ({decision.why})")
    if decision.act:
        return _say(CRITICAL, f"due: {decision.why}")
    if decision.kind == "refuse":
        return _say(WARNING, f"held back: {decision.why}")
    return _say(OK, f"nothing to restart: {decision.why}")


def _say(code: int, text: str) -> int:
    print(f"{LABEL} {CODE_NAMES[code]} - {statusline.fit(text)}")
    return code
