"""Issue 46, case 5: vLLM 0.34's elastic expert-parallel scaling. While it scales, or once its rank is retired, its
ScalingMiddleware answers every path but /health and /is_scaling_elastic_ep (/metrics too) with 503 and a body that
says why (vllm/entrypoints/serve/elastic_ep/middleware.py). 4e70de5 read that as `unresponsive`, proven and
restarted mid-scale; it is the server's own word: a pause (never restarted), or a rank stopping."""

from __future__ import annotations

import json
import time

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.pages import PageServer, page
from tests.rig.scripts import FAST

SCALING = (503, json.dumps({"error": "The model is currently scaling. Please try again later."}).encode())
RETIRED = (503, json.dumps({"error": "This data-parallel rank has been retired and is awaiting shutdown."}).encode())
ARGS = (*FAST, "--stuck-seconds", "1", "--stuck-readings", "2", "--pause-grace", "2")


def test_scaling_is_paused_never_restarted_and_warning_past_the_pause_grace(run_check):
    with PageServer(page("idle")) as srv:
        srv.metrics_off = SCALING
        seen = []
        for _ in range(6):
            seen.append(run_check("-u", srv.url, *ARGS))
            time.sleep(0.6)
    lines = [r.first for r in seen]
    assert all(r.word == "paused" and r.code != CRITICAL for r in seen), lines
    assert seen[0].code == OK and seen[-1].code == WARNING, lines
    assert seen[0].status.startswith('paused: its server says it holds itself: HTTP 503 "The model is currently '
                                     'scaling. Please try again later." (vLLM), for 0.0 s'), lines


def test_a_retired_rank_is_stopping(run_check):
    with PageServer(page("idle")) as srv:
        srv.metrics_off = RETIRED
        seen = [run_check("-u", srv.url, *ARGS) for _ in range(3)]
    assert all((r.code, r.word) == (WARNING, "stopping") for r in seen), [r.first for r in seen]
    assert "rank has been retired and is awaiting shutdown" in seen[-1].status


def test_an_idle_probe_turned_away_by_scaling_is_paused(run_check):
    """The data-parallel scaling middleware leaves /metrics alone: the page reads idle, the probe gets the 503."""
    with PageServer(page("idle")) as srv:
        srv.post_answer = SCALING
        r = run_check("-u", srv.url, *ARGS)
    assert (r.code, r.word) == (OK, "paused"), r.first
    assert r.status.startswith('paused: the engine turns requests away as paused (completion answered HTTP 503 "The '
                               'model is currently scaling. Please try again later." (vLLM))'), r.first
