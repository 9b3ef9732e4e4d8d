"""The soak's seeded fault schedule, and how each fault is done to the real server.

| fault        | what the test does                                            | restarts by the handler |
|--------------|---------------------------------------------------------------|-------------------------|
| short_stop   | SIGSTOP VLLM::EngineCore for 0.3-0.6 x --stuck-seconds, SIGCONT | 0                     |
| long_stop    | SIGSTOP VLLM::EngineCore until the handler restarts it          | 1 (stuck)             |
| kill         | SIGKILL VLLM::EngineCore                                        | 1 (down)              |
| operator     | `supervisorctl restart vllm` by hand, under load (issue 15)     | 0                     |
| slow_metrics | two CPU burners in their own autogroups (nice 0) starve the API | 0                     |
|              | server's nice-19 autogroup for 0.6-0.8 x --stuck-seconds        |                       |

Every fault runs under a sustained load (the server busy when it strikes). Its place in the run is seeded;
a fault that needs an old server process (kill, operator: a process younger than --start-grace reads
"starting", never "down") or the handler out of its cooldown waits for that, in a normal window.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .settings import Soak

KINDS = ("short_stop", "long_stop", "kill", "operator", "slow_metrics")
#: Handler restarts each fault must cause, and the verdict the restart must name.
EXPECTED = {"short_stop": (0, None), "long_stop": (1, "stuck"), "kill": (1, "down"), "operator": (0, None),
            "slow_metrics": (0, None)}
#: Words a fault window may show (beyond these: the window fails).
ALLOWED = {
    "short_stop": {"busy", "stalling", "idle"},
    # stopping: the old process, which served, closing its listener while supervisord stops it
    "long_stop": {"busy", "stalling", "stuck", "stopping", "starting", "restarted", "idle"},
    "kill": {"busy", "stalling", "unresponsive", "stopping", "down", "starting", "restarted", "idle"},
    # no down: between the old process's exit and the new one's spawn the stop goes on (issue 17)
    "operator": {"busy", "stalling", "idle", "unresponsive", "stopping", "starting", "restarted"},
    "slow_metrics": {"busy", "stalling", "idle", "unresponsive"},
}
#: Faults that need the server's process older than --start-grace, and the handler out of its cooldown.
NEEDS_OLD = {"kill", "operator"}
NEEDS_COOLDOWN = {"kill", "operator", "long_stop"}


@dataclass
class Fault:
    kind: str
    normal_before: float           # seconds of normal traffic before it (at least)
    hold: float = 0.0              # short_stop, slow_metrics: how long
    record: dict = field(default_factory=dict)

    def describe(self) -> str:
        hold = f" for {self.hold:.1f}s" if self.hold else ""
        return f"{self.kind}{hold} after >= {self.normal_before:.0f}s normal"


def schedule(soak: Soak) -> list[Fault]:
    rng = random.Random(soak.seed)
    # The restarting faults in one of the two orders that wait least: each fault needing an old process
    # comes --start-grace after the previous restart, the long stop only the cooldown after one. The two
    # that restart nothing go into random places (they fill those waits).
    kinds = rng.choice([["kill", "long_stop", "operator"], ["operator", "long_stop", "kill"]])
    for k in ("short_stop", "slow_metrics"):
        kinds.insert(rng.randint(0, len(kinds)), k)
    normal = (20.0, 40.0) if not soak.long else (120.0, 400.0)
    out = []
    for k in kinds:
        hold = 0.0
        if k == "short_stop":
            hold = round(soak.stuck_seconds * rng.uniform(0.3, 0.6), 1)
        elif k == "slow_metrics":
            hold = round(soak.stuck_seconds * rng.uniform(0.6, 0.8), 1)
        out.append(Fault(k, round(rng.uniform(*normal), 0), hold))
    return out


def describe(faults: list[Fault]) -> str:
    return " | ".join(f"{i + 1}. {f.describe()}" for i, f in enumerate(faults))


# --------------------------------------------------------------------------- doing them


def burners(n: int = 2) -> list[subprocess.Popen]:
    """n busy loops, each in a new session (its own autogroup at nice 0): against them the server's nice-19
    autogroup gets ~15/1024 of a CPU's share."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]


def stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(10)


def autogroup(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return f.read().strip()
    except OSError as err:
        return f"? ({err.strerror})"


def signal_engine(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False



def hold_signal(seconds: float) -> None:
    """Sleep exactly `seconds` (the fault's duration is a measurement, not a floor)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))


SIGS = {"SIGSTOP": signal.SIGSTOP, "SIGCONT": signal.SIGCONT, "SIGKILL": signal.SIGKILL}
