"""Metrics text -> Reading: current and older vLLM names, per engine, and pages that are not metrics."""

from __future__ import annotations

import pytest

from check_vllm.server.reading import NotMetrics, parse

V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 2.0
vllm:num_requests_running{engine="1",model_name="tiny-llama"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 3.0
vllm:num_requests_waiting{engine="1",model_name="tiny-llama"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny-llama",reason="capacity"} 99.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25
vllm:engine_sleep_state{engine="0",model_name="tiny-llama",sleep_state="awake"} 1.0
vllm:engine_sleep_state{engine="0",model_name="tiny-llama",sleep_state="weights_offloaded"} 0.0
vllm:engine_sleep_state{engine="1",model_name="tiny-llama",sleep_state="awake"} 0.0
vllm:engine_sleep_state{engine="1",model_name="tiny-llama",sleep_state="weights_offloaded"} 1.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 1234.0
vllm:generation_tokens_created{engine="0",model_name="tiny-llama"} 1.7000001e+09
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny-llama"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 4.0
vllm:request_success_created{engine="0",finished_reason="length",model_name="tiny-llama"} 1.7000002e+09
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="tiny-llama"} 5.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny-llama"} 77.0
vllm:iteration_tokens_total_sum{engine="0",model_name="tiny-llama"} 999.0
vllm:prompt_tokens_total{engine="0",model_name="tiny-llama"} 50.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny-llama",source="x"} 7.0
process_start_time_seconds 1.69999e+09
"""


def test_current_names_per_engine():
    r = parse(V1)
    assert set(r.engines) == {"0", "1"}
    e0, e1 = r.engines["0"], r.engines["1"]
    assert (e0.running, e0.waiting, e0.kv_cache) == (2.0, 3.0, 0.25)
    assert (e0.steps, e0.step_tokens, e0.generation_tokens, e0.prompt_tokens) == (77.0, 999.0, 1234.0, 50.0)
    assert e0.finished == 7.0  # summed over finished_reason
    assert e0.created == pytest.approx(1.7000002e9)
    assert (e0.asleep, e1.asleep) == (False, True)
    assert (e1.running, e1.waiting, e1.steps) == (1.0, 0.0, None)
    assert r.process_start == pytest.approx(1.69999e9)
    assert r.model == "tiny-llama"
    assert r.work == 6.0


def test_legacy_v0_names_without_engine_label():
    page = """\
vllm:num_requests_running{model_name="m"} 1.0
vllm:num_requests_swapped{model_name="m"} 0.0
vllm:num_requests_waiting{model_name="m"} 0.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:generation_tokens_total{model_name="m"} 10.0
"""
    r = parse(page)
    assert list(r.engines) == [""]
    assert r.engines[""].kv_cache == 0.5 and r.engines[""].asleep is None


@pytest.mark.parametrize("page", [
    "<html><body><h1>502 Bad Gateway</h1></body></html>",
    "",
    "\x00\x01\x02garbage",
    "# HELP only comments\n",
    "node_cpu_seconds_total 5\nprocess_start_time_seconds 5\n",
])
def test_not_metrics(page):
    with pytest.raises(NotMetrics):
        parse(page)


def test_nan_inf_and_negative_values_are_not_trusted():
    page = """\
vllm:num_requests_running{engine="0"} NaN
vllm:num_requests_waiting{engine="0"} -3
vllm:generation_tokens_total{engine="0"} +Inf
vllm:prompt_tokens_total{engine="0"} 5
"""
    e = parse(page).engines["0"]
    assert (e.running, e.waiting, e.generation_tokens, e.prompt_tokens) == (0.0, 0.0, None, 5.0)


def test_labels_in_any_order_and_unknown_families():
    page = """\
vllm:num_requests_running{model_name="m",engine="0",extra="x"} 2
vllm:something_new_total{engine="0"} 3
vllm:num_requests_waiting{zz="1",engine="0"} 1
vllm:generation_tokens_total{zz="1",engine="0",model_name="m"} 5
"""
    e = parse(page).engines["0"]
    assert (e.running, e.waiting, e.generation_tokens) == (2.0, 1.0, 5.0)


# An engine's request gauges appear with its first request in prometheus_client's multiprocess mode
# (data parallel, --api-server-count > 1): counters all at zero and no gauges is an engine that has had none.
FRESH = """\
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 0.0
vllm:generation_tokens_total{engine="0",model_name="m"} 0.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 0.0
"""
SERVED = """\
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:iteration_tokens_total_count{engine="1",model_name="m"} 7.0
vllm:generation_tokens_total{engine="1",model_name="m"} 9.0
"""


def test_an_engine_that_served_nothing_has_no_work_even_without_gauges():
    r = parse(FRESH + SERVED)
    assert r.engines["0"].running == 0 and r.engines["0"].waiting == 0 and r.engines["1"].running == 1


@pytest.mark.parametrize("page", [
    FRESH.replace("total_count{engine=\"0\",model_name=\"m\"} 0.0", "total_count{engine=\"0\",model_name=\"m\"} 3.0"),
    FRESH.replace("finished_reason=\"stop\",model_name=\"m\"} 0.0", "finished_reason=\"stop\",model_name=\"m\"} 1.0"),
    FRESH + 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n',
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0\n',
], ids=["steps counted", "a request finished", "kv cache in use", "no counter at all"])
def test_an_engine_without_gauges_that_has_served_is_work_unknown(page):
    with pytest.raises(NotMetrics, match="work unknown|no vllm: request metrics|no progress"):
        parse(page)
