"""Re-record the real vLLM /metrics pages in tests/fixtures/real/ (run from the project's Python):

    python tests/real_vllm/record_fixtures.py [OUT_DIR]

Starts the real vLLM CPU server (installing the venv / generating the tiny model if needed) and saves:
  idle.txt        freshly started, after one completion (max_tokens 1)
  saturated.txt   5 concurrent 2000-token generations, --max-num-seqs 2 (running 2, waiting >= 1)
  saturated_b.txt the same load, read 2 s after saturated.txt (engine steps and tokens advanced: busy)
  frozen_a.txt    EngineCore SIGSTOPped under that load, first read (1 s after the stop)
  frozen_b.txt    second read 2 s later (engine families identical to frozen_a)
  restarted.txt   first read after a restart (after /health 200, before any request)
The local model path is replaced with `tiny-llama`. Exits non-zero if a page does not show what it should.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

if __package__:
    from tests.rig.vllm_server import (
        CACHE_DIR,
        REPO_ROOT,
        VllmServer,
        ensure_tiny_model,
        ensure_venv,
        free_port,
        neutralize,
        sample_sum,
    )
else:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from server import (  # noqa: E402
        CACHE_DIR,
        REPO_ROOT,
        VllmServer,
        ensure_tiny_model,
        ensure_venv,
        free_port,
        neutralize,
        sample_sum,
    )

ENGINE = ["vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
          "vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total",
          "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]


def engine_view(text: str) -> dict:
    return {k: sample_sum(text, k) for k in ENGINE}


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else REPO_ROOT / "tests" / "fixtures" / "real"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    venv = ensure_venv()
    model = ensure_tiny_model(venv)
    port = free_port()
    srv = VllmServer(venv, model, port=port, log_path=CACHE_DIR / "logs" / f"record-{port}.log")
    pages: dict[str, str] = {}
    problems: list[str] = []

    def running_waiting(t):
        return sample_sum(t, "vllm:num_requests_running"), sample_sum(t, "vllm:num_requests_waiting")

    try:
        srv.start()
        print(f"server up in {srv.start_seconds:.1f}s at {srv.url}", flush=True)
        srv.completion("Hello", max_tokens=1)
        pages["idle"] = srv.wait_for(lambda t: sample_sum(t, "vllm:request_success_total") == 1
                                     and running_waiting(t) == (0, 0), timeout=30)

        load = srv.load(5, 2000, repeat=True)
        try:
            srv.wait_for(lambda t: running_waiting(t)[0] == 2 and running_waiting(t)[1] >= 1, timeout=60)
            time.sleep(2)
            pages["saturated"] = srv.wait_for(
                lambda t: running_waiting(t)[0] == 2 and running_waiting(t)[1] >= 1, timeout=30)
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
        print(f"aborted clients: request_success_total by reason "
              f"{[(r, srv.counter('vllm:request_success_total', {'finished_reason': r})) for r in ('length', 'abort')]}")

        srv.restart()
        pages["restarted"] = srv.metrics_text()
    finally:
        srv.stop()

    s1, s2 = engine_view(pages["saturated"]), engine_view(pages["saturated_b"])
    if not (s2["vllm:iteration_tokens_total_count"] > s1["vllm:iteration_tokens_total_count"]
            and s2["vllm:num_requests_running"] == 2):
        problems.append(f"saturated pages show no progress or no saturation: {s1} vs {s2}")
    a, b = engine_view(pages["frozen_a"]), engine_view(pages["frozen_b"])
    if a != b:
        problems.append(f"frozen pages differ: {a} vs {b}")
    if running_waiting(pages["frozen_b"])[0] != 2:
        problems.append(f"frozen page not saturated: {running_waiting(pages['frozen_b'])}")
    if not (sample_sum(pages["restarted"], "process_start_time_seconds")
            > sample_sum(pages["idle"], "process_start_time_seconds")):
        problems.append("process_start_time_seconds did not change across the restart")

    for name, text in pages.items():
        text = neutralize(text, model)
        if str(model) in text or str(CACHE_DIR) in text:
            problems.append(f"{name}: local path left in the page")
        (out / f"{name}.txt").write_text(text)
        print(f"wrote {out / (name + '.txt')}: {len(text.splitlines())} lines, "
              f"running/waiting {running_waiting(text)}, steps {sample_sum(text, 'vllm:iteration_tokens_total_count')}")
    print(f"done in {time.monotonic() - t0:.1f}s")
    for p in problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
