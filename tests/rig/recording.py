"""Recording real /metrics pages: the six pages a recorder saves from a real vLLM server (idle, saturated twice,
frozen twice, restarted) and what must hold of them; shared by tests/real_vllm/record_fixtures.py (0.32.0) and
tests/real_vllm_matrix/record.py (every release)."""

from __future__ import annotations

import os
import signal
import time

from tests.rig.vllm_server import VllmServer, sample_sum

ENGINE = ["vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
          "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total",
          "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]


def engine_view(text: str) -> dict:
    return {k: sample_sum(text, k) for k in ENGINE}


def running_waiting(text: str) -> tuple[float | None, float | None]:
    return sample_sum(text, "vllm:num_requests_running"), sample_sum(text, "vllm:num_requests_waiting")


def record(srv: VllmServer) -> dict[str, str]:
    """The six pages every recorder saves, in the order a server goes through them (tests/rig/pages.py NAMES)."""
    pages: dict[str, str] = {}
    srv.start()
    print(f"{getattr(srv, 'release', 'vllm')}: server up in {srv.start_seconds:.1f}s at {srv.url}", flush=True)
    srv.completion("Hello", max_tokens=1)
    pages["idle"] = srv.wait_for(lambda t: sample_sum(t, "vllm:request_success_total") == 1
                                 and running_waiting(t) == (0, 0), timeout=30)
    load = srv.load(5, 2000, repeat=True)
    try:
        def full(t: str) -> bool:
            return running_waiting(t)[0] == 2 and (running_waiting(t)[1] or 0) >= 1
        srv.wait_for(full, timeout=60)
        time.sleep(2)
        pages["saturated"] = srv.wait_for(full, timeout=30)
        time.sleep(2)
        pages["saturated_b"] = srv.metrics_text()
        engine = srv.engine_core_pid()
        os.kill(engine, signal.SIGSTOP)
        try:
            time.sleep(1)
            pages["frozen_a"] = srv.metrics_text()
            time.sleep(2)
            pages["frozen_b"] = srv.metrics_text()
        finally:
            os.kill(engine, signal.SIGCONT)
    finally:
        load.stop()
    srv.wait_for(lambda t: running_waiting(t) == (0, 0), timeout=60)
    srv.restart()
    pages["restarted"] = srv.metrics_text()
    return pages


def problems_of(pages: dict[str, str]) -> list[str]:
    problems = []
    s1, s2 = engine_view(pages["saturated"]), engine_view(pages["saturated_b"])
    if not (s2["vllm:iteration_tokens_total_count"] > s1["vllm:iteration_tokens_total_count"]
            and s2["vllm:num_requests_running"] == 2):
        problems.append(f"saturated pages show no progress or no saturation: {s1} vs {s2}")
    a, b = engine_view(pages["frozen_a"]), engine_view(pages["frozen_b"])
    if a != b:
        problems.append(f"frozen pages differ: {a} vs {b}")
    if running_waiting(pages["frozen_b"])[0] != 2:
        problems.append(f"frozen page not saturated: {running_waiting(pages['frozen_b'])}")
    start_idle = sample_sum(pages["idle"], "process_start_time_seconds")
    start_new = sample_sum(pages["restarted"], "process_start_time_seconds")
    if start_idle is not None and not (start_new or 0) > start_idle:
        problems.append("process_start_time_seconds did not change across the restart")
    return problems
