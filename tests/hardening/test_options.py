"""Timing options that contradict each other are a usage error, end to end: exit 3, both options named,
and nothing read from the server. A --max-age no longer than the stall it must span (or than the gap or
re-read that measures it) would silently make every reading "no baseline", so stuck could never be proved."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from vllm_simulator import Simulator

from .conftest import CHECK, FAST, OK, UNKNOWN, Loopback, metrics_from, sim_page


@pytest.fixture
def busy_server() -> Iterator[Loopback]:
    with Simulator(scenario="busy") as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim))}) as srv:
        yield srv


CONTRADICTIONS = [
    (("--max-age", "0"), ("--max-age", "--stuck-seconds")),
    (("--max-age", "100"), ("--max-age", "--stuck-seconds")),  # the default --stuck-seconds is 120
    (("--max-age", "60", "--stuck-seconds", "60"), ("--max-age", "--stuck-seconds")),  # equal is not longer
    (("--max-age", "0", "--stuck-seconds", "0", "--min-gap", "0", "--reread-delay", "0"), ("--max-age",)),
    (("--min-gap", "4000"), ("--min-gap", "--max-age")),  # the default --max-age is 3600
    (("--max-age", "10", "--stuck-seconds", "0", "--min-gap", "10"), ("--max-age", "--min-gap")),
    (("--reread-delay", "3600"), ("--reread-delay", "--max-age")),
    (("--max-age", "5", "--stuck-seconds", "1", "--min-gap", "1", "--reread-delay", "5"),
     ("--max-age", "--reread-delay")),
]


@pytest.mark.parametrize("args,named", CONTRADICTIONS, ids=[" ".join(a) for a, _ in CONTRADICTIONS])
def test_contradictory_timing_options_are_a_usage_error(check, tmp_path, busy_server, args, named):
    r = check("-u", busy_server.url, *args)
    assert r.code == UNKNOWN, r.out
    assert r.first.startswith("VLLM UNKNOWN - usage: "), r.out
    for option in named:
        assert option in r.status, (option, r.out)
    assert "--max-age" in r.status, r.out  # every one of these relations is against --max-age
    assert busy_server.seen == [], "a refused command line must not read the server"
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir()), "nor write state"


def test_just_consistent_timing_options_still_run(check, busy_server):
    """The relations are strict, and only they: one more second of --max-age runs the check, and -t
    shorter than --probe-timeout is no contradiction (a probe cut short by -t already proves nothing)."""
    r = check("-u", busy_server.url, "--max-age", "60", "--stuck-seconds", "60", *FAST)
    assert r.code == UNKNOWN and "usage" in r.status, r.out
    r = check("-u", busy_server.url, "--max-age", "61", "--stuck-seconds", "60", "-t", "5",
              "--probe-timeout", "10", *FAST)
    assert (r.code, r.word) == (OK, "busy"), r.out


def test_help_states_the_relations():
    out = subprocess.run([CHECK, "--help"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"},
                         timeout=30).stdout
    flat = " ".join(out.split())
    assert "must be longer than the check interval and than --stuck-seconds, --min-gap and --reread-delay" in flat, out
    for option in ("--stuck-seconds S", "--min-gap S", "--reread-delay S"):
        helptext = flat.rsplit(option, 1)[1].split("(default", 1)[0]  # the entry, not the usage line
        assert "less than --max-age" in helptext, (option, helptext)
