"""Now, on the two clocks check_vllm.contract.instants.Instant carries: the wall clock and this boot's boot-time clock.

The boot id tells whether two boot-time readings belong to the same boot (after a reboot the clock
starts again and readings of two boots cannot be compared).
"""

from __future__ import annotations

import time

from check_vllm.contract.instants import Instant

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    try:
        with open(BOOT_ID, encoding="ascii") as fh:
            return fh.read(64).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def now() -> Instant:
    boot = boot_id()
    return Instant(time.time(), time.clock_gettime(time.CLOCK_BOOTTIME) if boot else None, boot)
