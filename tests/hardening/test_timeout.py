"""The plugin's -t always wins: whatever blocks, the run ends by -t with UNKNOWN naming what it waited for,
or earlier with a specific verdict when the slow part was the server."""

from __future__ import annotations

import fcntl
import os
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from check_vllm.memory.statefile import state_path
from vllm_simulator import Simulator

from .conftest import FAST, UNKNOWN, WARNING, Loopback, metrics_from, sim_page

SLACK = 1.5  # interpreter start-up and exit on a loaded CI machine


def test_state_lock_held_by_another_run(check, tmp_path):
    with Simulator(scenario="busy") as sim:
        lock = state_path(tmp_path / "state", sim.url).with_suffix(".lock")
        lock.parent.mkdir(parents=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            r = check("-u", sim.url, "-t", "3", *FAST)
        finally:
            os.close(fd)
        assert r.code == UNKNOWN, r.out
        assert "another check_vllm run on this target held the state lock" in r.status, r.out
        assert r.seconds < 3 + SLACK


def test_api_key_file_that_would_never_deliver_is_refused_at_once(check, tmp_path):
    """A FIFO as --api-key-file (or --ca-file) is refused before it is read (opened O_NONBLOCK, not a regular file):
    the run says so at once instead of waiting out -t, as a Netdata job, which has no -t, must."""
    fifo = tmp_path / "key"
    os.mkfifo(fifo)
    for flag in ("--api-key-file", "--ca-file"):
        r = check("-u", "http://127.0.0.1:9", flag, str(fifo), "-t", "10", *FAST)
        assert r.code == UNKNOWN, r.out
        assert r.first.startswith(f"VLLM UNKNOWN - usage: {'cannot read ' if flag == '--api-key-file' else ''}{flag} "
                                  f"{fifo}"), r.out
        assert "not a regular file" in r.first, r.out
        assert r.seconds < 2 + SLACK


def test_probe_cut_short_by_the_timeout_is_no_proof_of_stuck(check):
    """The idle probe gets what is left of -t; a probe denied its full --probe-timeout proves nothing."""
    hold = threading.Event()

    def never(h: BaseHTTPRequestHandler) -> None:
        hold.wait(30)

    with Simulator(scenario="idle") as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim)),
                                                       "POST /v1/completions": never}) as srv:
        try:
            r = check("-u", srv.url, "-t", "4", "--probe-timeout", "10", *FAST)
        finally:
            hold.set()
        assert r.seconds < 4 + SLACK
        assert (r.code, r.word) == (WARNING, "idle"), r.out
        assert "not proof of a stall" in r.status, r.out


@pytest.mark.parametrize("seconds", ["2", "3.5"])
def test_slow_metrics_never_outlasts_t(check, seconds):
    with Simulator(scenario="slow", slow_seconds=30) as sim:
        r = check("-u", sim.url, "-t", seconds, *FAST)
        assert r.seconds < float(seconds) + SLACK, r.seconds
        assert r.code in (WARNING, UNKNOWN), r.out
        assert "/metrics" in r.status, r.out
