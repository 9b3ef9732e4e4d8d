"""When check_vllm_restart may restart a server: the decision table, pure (no files, no clock, no argv).

It restarts only when all of these hold:

- the service is CRITICAL and the state is HARD (SOFT retries are the scheduler still making sure);
- the check's own last verdict (from its state file, not the output text) is a fresh CRITICAL stuck,
  down or unresponsive, written after the last restart this handler made;
- the last restart is older than the cooldown (a large model takes minutes to load);
- fewer than max_per_hour restarts happened in the last hour (circuit breaker: a server that a
  restart does not cure needs a human, not a restart loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from check_vllm.contract.kept import Remembered
from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, PROXY, RESTARTABLE

HOUR = 3600.0
#: A verdict or a restart dated this far in the future (clock steps between hosts/processes) is still taken
#: as written; beyond it, the clock stepped back.
CLOCK_SLACK = 5.0


@dataclass(frozen=True)
class Policy:
    cooldown: float = 900.0
    max_per_hour: int = 3
    max_verdict_age: float = 600.0
    proxy: bool = False


@dataclass(frozen=True)
class Event:
    """What the scheduler told us: $SERVICESTATE$ $SERVICESTATETYPE$ $SERVICEATTEMPT$."""

    service_state: str  # OK | WARNING | CRITICAL | UNKNOWN
    state_type: str  # SOFT | HARD
    attempt: int | None = None
    #: Scheduled downtimes over the service and over its host ($service.downtime_depth$, $SERVICEDOWNTIME$...).
    service_downtime: int = 0
    host_downtime: int = 0
    #: An operator acknowledged the problem ($service.acknowledgement$): a human has taken it over.
    acknowledged: bool = False


@dataclass(frozen=True)
class Decision:
    act: bool
    why: str
    #: "restart" when acting; otherwise "skip" (nothing to do) or "refuse" (would act, but a guard says no).
    kind: str = "skip"


def decide(event: Event, verdict: Remembered | None, problem: str | None, restarts: Sequence[float],
           policy: Policy, now: float) -> Decision:
    """The decision table: pure, no I/O. `restarts` are the wall-clock times of earlier restarts."""
    gate = screen(event)
    if gate is not None:
        return gate
    if not verdict:
        return Decision(False, f"no verdict in the check's state file ({problem or 'none written yet'})")
    unproven = proven_hang(verdict, policy, now)
    if unproven is not None:
        return unproven
    word, at = verdict.word, verdict.at or 0.0
    age = now - at
    last = max(restarts, default=None)
    if last is not None and at <= last:
        return Decision(False, f"verdict {word!r} was written {last - at:.0f} s before the last restart "
                               f"({now - last:.0f} s ago): waiting for a check of the restarted server")
    if last is not None and now - last < policy.cooldown:
        return Decision(False, f"verdict {word!r}, but the last restart was {now - last:.0f} s ago "
                               f"(cooldown {policy.cooldown:g} s)", "refuse")
    recent = this_hour(restarts, now)
    if recent >= policy.max_per_hour:
        return Decision(False, f"verdict {word!r}, but circuit breaker open: {recent} restarts in the last "
                               f"hour (--max-per-hour {policy.max_per_hour}); a restart does not cure this "
                               f"server, a human must look", "refuse")
    return Decision(True, f"verdict {word!r} ({verdict.text}) {age:.0f} s old, service CRITICAL HARD",
                    "restart")


def proven_hang(verdict: Remembered, policy: Policy, now: float) -> Decision | None:
    """The one gate for "a fresh proven hang", the restart's and --take-post-mortem's: None when the verdict is
    one (a restartable word, or --proxy's, at CRITICAL, dated, not older than --max-verdict-age nor from the
    future), else the refusal that says why."""
    word, code, at = verdict.word, verdict.code, verdict.at
    words = (*RESTARTABLE, PROXY) if policy.proxy else RESTARTABLE
    if word not in words:
        return Decision(False, f"the check's last verdict is {word!r}, not one of {'/'.join(words)}")
    if code != CRITICAL:
        return Decision(False, f"the check's last verdict {word!r} is not CRITICAL yet")
    if at is None:
        return Decision(False, f"the check's verdict {word!r} has no valid time")
    age = now - at
    if age > policy.max_verdict_age:
        return Decision(False, f"the check's verdict {word!r} is {age:.0f} s old "
                               f"(--max-verdict-age {policy.max_verdict_age:g}): not fresh")
    if age < -CLOCK_SLACK:
        return Decision(False, f"the check's verdict {word!r} is dated {-age:.0f} s in the future")
    return None


def this_hour(restarts: Sequence[float], now: float) -> int:
    """The restarts the circuit breaker counts (times from history.restart_times): the handler's log says
    "restart N of at most M" with this same count."""
    return sum(1 for t in restarts if 0 <= now - t < HOUR)


def screen(event: Event) -> Decision | None:
    """The part of the decision that needs no files: most calls are OK or SOFT results. Nagios runs event
    handlers in downtime too (nagioscore#949): a downtime is an operator's "hands off", and so is an
    acknowledgement (someone is looking at the stuck server; a restart would destroy what they look at)."""
    if event.service_state != CODE_NAMES[CRITICAL]:
        return Decision(False, f"service is {event.service_state}, not CRITICAL")
    if event.state_type != "HARD":
        attempt = f" (attempt {event.attempt})" if event.attempt is not None else ""
        return Decision(False, f"CRITICAL but SOFT{attempt}: waiting for a HARD state")
    if event.service_downtime > 0 or event.host_downtime > 0:
        which = "the service" if event.service_downtime > 0 else "its host"
        return Decision(False, f"CRITICAL HARD, but {which} is in a scheduled downtime: hands off until it ends",
                        "refuse")
    if event.acknowledged:
        return Decision(False, "CRITICAL HARD, but an operator acknowledged the problem: a human has it", "refuse")
    return None
