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

import sys
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.rig.recording import problems_of, record, running_waiting  # noqa: E402
from tests.rig.vllm_server import (  # noqa: E402
    CACHE_DIR,
    REPO_ROOT,
    VllmServer,
    ensure_tiny_model,
    ensure_venv,
    free_port,
    neutralize,
    sample_sum,
)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else REPO_ROOT / "tests" / "fixtures" / "real"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    venv = ensure_venv()
    model = ensure_tiny_model(venv)
    port = free_port()
    srv = VllmServer(venv, model, port=port, log_path=CACHE_DIR / "logs" / f"record-{port}.log")
    try:
        pages = record(srv)
    finally:
        srv.stop()
    problems = problems_of(pages)

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
