"""The soak's knobs: SOAK_MINUTES and SOAK_SEED from the environment, and the two settings sets.

A short soak (CI, SOAK_MINUTES < 30, default 7: the seeded schedule's faults end near 400 s, and the last
normal window runs at least 20 s past them whatever the minutes) scales the check's and the handler's times down ~15x as
the incident tier does (tests/incident/incident.py); a long one (SOAK_MINUTES >= 30) runs the shipped
defaults: the CheckCommand's own (no --stuck-seconds etc. given) and contrib/icinga2/vllm-services.conf's
intervals and handler limits. Frozen values only: nothing here changes while a soak runs.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from check_vllm.contract.defaults import SETTINGS
from tests.rig import incident

#: What the supervised vLLM runs with (tests/incident/supervisor.py's program block).
MAX_NUM_SEQS, MAX_MODEL_LEN = 2, 2048
LONG_MINUTES = 30
START_GRACE_SHORT = 120
#: The short soak puts an hour's faults into minutes; the breaker's window (an hour) is not scaled with them.
MAX_PER_HOUR_SHORT = 6


@dataclass(frozen=True)
class Soak:
    minutes: float
    seed: int
    check_interval: float
    retry_interval: float
    max_attempts: int
    check_timeout: float
    check_vars: dict = field(default_factory=dict)
    handler_vars: dict = field(default_factory=dict)
    #: seconds the sampler waits between two looks at the server
    sample_every: float = 0.5

    @property
    def long(self) -> bool:
        return self.minutes >= LONG_MINUTES

    @property
    def stuck_seconds(self) -> float:
        return float(self.check_vars.get("vllm_stuck_seconds", SETTINGS.stuck_seconds))

    @property
    def start_grace(self) -> float:
        return float(self.check_vars.get("vllm_start_grace", SETTINGS.start_grace))

    @property
    def cooldown(self) -> float:
        return float(self.handler_vars["vllm_restart_cooldown"])

    def describe(self) -> str:
        knobs = {**self.check_vars, **self.handler_vars}
        return (f"SOAK_MINUTES={self.minutes:g} SOAK_SEED={self.seed} ({'long: shipped defaults' if self.long else 'short'})"
                f"; check every {self.check_interval:g} s, retry {self.retry_interval:g} s, {self.max_attempts} "
                f"attempts; stuck_seconds={self.stuck_seconds:g} start_grace={self.start_grace:g}; "
                + ", ".join(f"{k.replace('vllm_', '')}={v}" for k, v in knobs.items()))


def from_env(env: dict | None = None) -> Soak:
    env = os.environ if env is None else env
    try:
        minutes = float(env.get("SOAK_MINUTES") or 7)
        seed = int(env.get("SOAK_SEED") or int(time.time()) % 100000)
    except ValueError as err:
        raise SystemExit(f"SOAK_MINUTES / SOAK_SEED: {err}") from None
    if minutes >= LONG_MINUTES:
        # contrib/icinga2/vllm-services.conf; the check's options are its defaults (none given)
        return Soak(minutes, seed, 60, 30, 3, 60, check_vars={},
                    handler_vars={"vllm_restart_cooldown": 900, "vllm_restart_max_per_hour": 3,
                                  "vllm_restart_max_verdict_age": 180, "vllm_restart_command_timeout": 120},
                    sample_every=1.0)
    # the incident's scaled-down settings, but a longer --start-grace (a boot on this shared 2-core machine
    # under the soak's traffic took 78+ s: over the incident's 75, read "down" and restarted mid-load) and a
    # circuit breaker that leaves room for an hour's restarts squeezed into minutes
    return Soak(minutes, seed, incident.CHECK_INTERVAL, incident.RETRY_INTERVAL, incident.MAX_ATTEMPTS, 30,
                check_vars={**incident.CHECK_VARS, "vllm_start_grace": START_GRACE_SHORT},
                handler_vars={**incident.HANDLER_VARS, "vllm_restart_max_per_hour": MAX_PER_HOUR_SHORT})
