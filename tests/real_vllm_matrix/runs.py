"""Running the installed check against a real server, and reading the server's own counters: what every
scenario of the release matrix shares (the `check` fixture itself is in conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING
from tests.rig.scripts import Result, checked, script  # noqa: F401  (the matrix modules take them here)
from tests.rig.vllm_server import VllmServer, sample_sum

CHECK = script("check_vllm")
CODE_OF = {"OK": OK, "WARNING": WARNING, "CRITICAL": CRITICAL, "UNKNOWN": UNKNOWN}
GAP = 0.5                       # --min-gap: runs closer than this repeat the last verdict
FAST = ("--min-gap", str(GAP), "--reread-delay", "1")
STUCK = ("--stuck-readings", "2", "--stuck-seconds", "2", *FAST)
PAUSE = 1.2                     # between runs of the SIGSTOP scenario: 2 comparisons span > 2 s
LONG = 2000                     # tokens per generation (prompt ~12 + 2000 <= --max-model-len 2048)

Check = Callable[..., Result]


def completions(text: str, handler: str = "/v1/completions") -> float:
    return sample_sum(text, "http_requests_total", {"handler": handler}) or 0.0


def finished(text: str, reason: str | None = None) -> float:
    return sample_sum(text, "vllm:request_success_total", {"finished_reason": reason} if reason else None) or 0.0


def run_until(check: Check, url: str, args: tuple[str, ...], done: Callable[[Result], bool],
              pause: float = GAP + 0.2, timeout: float = 60.0) -> list[Result]:
    seen: list[Result] = []
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(pause)
        seen.append(check(url, *args))
        if done(seen[-1]):
            return seen
        assert time.monotonic() < deadline, [s.first for s in seen]


def settled(srv: VllmServer, want: Callable[[str], bool], timeout: float = 30.0) -> str:
    """The server counts a request once its response is sent: wait for `want`, then a second more
    (anything else the check sent would be counted by then), and return that page."""
    srv.wait_for(want, timeout=timeout, interval=0.3)
    time.sleep(1.0)
    return srv.metrics_text()
