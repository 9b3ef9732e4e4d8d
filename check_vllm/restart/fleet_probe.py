"""The fleet restart budget kept by the liveness probe (check_vllm --probe liveness): a failing liveness is a
restart (the kubelet restarts the container, Docker's restarter acts on `unhealthy`), so before it fails on a
proven hang it asks the fleet the handler's question (check_vllm.restart.fleet_ask.consult) within what the
probe's -t leaves. Over the budget it passes in spite of the proof, its line saying why, and a person decides;
readiness still fails on the same verdict (traffic stays away). The pass or fail itself is the probe's pure table
(check_vllm.probes.answers.budgeted).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from check_vllm.cli.args import Deadline
from check_vllm.probes import answers
from check_vllm.probes.answers import Answer
from check_vllm.restart.fleet import Budget, unasked
from check_vllm.restart.fleet_ask import consult
from check_vllm.restart.policy import Decision

#: Seconds of -t kept after the question for the line and the exit.
MARGIN = 0.5
#: Fewer seconds than this left for the question: it is not asked.
LEAST = 0.2
Ask = Callable[[Budget, Decision], Decision]


def kept(reply: Answer, budget: Budget, ends: float, ask: Ask = consult,
         clock: Callable[[], float] = time.monotonic) -> Answer:
    """`reply` once the fleet's budget was asked, if it restarts (a failing liveness); any other answer as it is.
    `ends`: the monotonic time the probe's -t ends (its alarm); the question gets --fleet-timeout, cut to what is
    left of it after MARGIN."""
    if not answers.restarts(reply):
        return reply
    restart = Decision(True, reply.why, "restart")
    left = ends - MARGIN - clock()
    if left < LEAST:
        decision = unasked(budget, f"no time left in -t for --fleet-timeout {budget.timeout:g}", restart)
    else:
        try:
            decision = ask(budget._replace(timeout=min(budget.timeout, left)), restart)
        except Deadline:  # -t's alarm, where a time-out could not reach (a name lookup)
            decision = unasked(budget, "-t ended while Prometheus was asked", restart)
    return answers.budgeted(reply, decision.act, decision.why, reply.why)
