"""The plugin's -t always wins: whatever blocks, the run ends by -t with UNKNOWN naming what it waited for,
or earlier with a specific verdict when the slow part was the server.

Time is what these prove, so each bound is the product's own figure, the -t given, x5 (a slow machine makes the
run slower, never red), and whatever blocks is made to block far longer than that."""

from __future__ import annotations

import fcntl
import os
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from check_vllm.memory.statefile import state_path
from vllm_simulator import Simulator

from .conftest import FAST, UNKNOWN, WARNING, Loopback, metrics_from, sim_page


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
        # the lock is waited for a third of -t (not LOCK_TIMEOUT, 10 s): the line says how long, no clock needed
        assert "another check_vllm run on this target held the state lock for 1 s" in r.status, r.out
        assert r.seconds < 5 * 3  # the product's own figure: -t 3, the run's whole budget, x5


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
        assert "not a regular file" in r.first, r.out  # refused unread: a read would block until -t, timed out


def test_probe_cut_short_by_the_timeout_is_no_proof_of_stuck(check):
    """The idle probe gets what is left of -t; a probe denied its full --probe-timeout proves nothing."""
    hold = threading.Event()

    def never(h: BaseHTTPRequestHandler) -> None:
        hold.wait(300)

    with Simulator(scenario="idle") as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim)),
                                                       "POST /v1/completions": never}) as srv:
        try:
            r = check("-u", srv.url, "-t", "4", "--probe-timeout", "60", *FAST)
        finally:
            hold.set()
        assert r.seconds < 5 * 4  # the product's own figure: -t 4, the run's whole budget, x5 (the probe had 60 s)
        assert (r.code, r.word) == (WARNING, "idle"), r.out
        assert "not proof of a stall" in r.status, r.out


@pytest.mark.parametrize("seconds", ["2", "3.5"])
def test_slow_metrics_never_outlasts_t(check, seconds):
    with Simulator(scenario="slow", slow_seconds=120) as sim:  # stopping the simulator lets the held page go
        r = check("-u", sim.url, "-t", seconds, *FAST)
        assert r.seconds < 5 * float(seconds), r.seconds  # the product's own figure: -t, the run's budget, x5
        assert r.code in (WARNING, UNKNOWN), r.out
        assert "/metrics" in r.status, r.out
