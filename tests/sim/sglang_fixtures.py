"""Regenerate tests/fixtures/source/sglang-0.5.23/: the pages the simulator's SGLang flavour renders, from source.

    .tox/py3/bin/python -m tests.sim.sglang_fixtures [OUT_DIR]      (from the repository root)

The engines are driven on a fixed clock (no server, no wall time), so the pages come out byte for byte the same on
every run; they are the flavour's pages, not a real server's (SGLang needs CUDA and was never run here).
"""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.core import Metric

from vllm_simulator.scenarios import EngineMode
from vllm_simulator.sglang_engine import SglangEngine, SglangOptions
from vllm_simulator.sglang_page import SglangView, render

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "source" / "sglang-0.5.23"
MODEL = "tiny-llama"
SLOTS = 2  # --max-running-requests of the simulated load


class _Page:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def text(engine: SglangEngine, scrapes: int, uptime: float, pid: int = 4242) -> bytes:
    """The page as the ``scrapes``-th GET /metrics of a process ``uptime`` seconds old would read it."""
    http = {("/metrics", "GET", ""): scrapes, ("/metrics", "GET", "200"): scrapes - 1}
    active = {("/metrics", "GET"): 1}
    if not engine.options.skip_server_warmup:
        for endpoint, method in (("/model_info", "GET"), ("/generate", "POST"), ("/freeze_gc", "POST")):
            http[(endpoint, method, "")] = http[(endpoint, method, "200")] = 1
            active[(endpoint, method)] = 0
    view = SglangView(MODEL, [engine], http, active, uptime, [pid])
    return generate_latest(_Page(render(view)))  # type: ignore[arg-type]


def run(engine: SglangEngine, mode: EngineMode, seconds: float, step: float = 0.5) -> None:
    """Credit ``seconds`` in ``mode`` in small steps, as a scraped simulator would."""
    for _ in range(round(seconds / step)):
        engine.advance(mode, step, SLOTS if mode in (EngineMode.BUSY, EngineMode.STUCK) else 0, 0.6)


def pages() -> dict[str, bytes]:
    """Every fixture page by file name."""
    out: dict[str, bytes] = {}
    fresh = SglangEngine.started(SglangOptions(skip_server_warmup=True))
    run(fresh, EngineMode.IDLE, 10)
    out["idle_fresh.txt"] = text(fresh, 1, 10)
    engine = SglangEngine.started(SglangOptions())
    run(engine, EngineMode.IDLE, 10)
    out["idle_warmed.txt"] = text(engine, 1, 10)
    run(engine, EngineMode.BUSY, 20)
    out["busy_a.txt"] = text(engine, 2, 30)
    run(engine, EngineMode.BUSY, 5)
    out["busy_b.txt"] = text(engine, 3, 35)
    hung = SglangEngine.started(SglangOptions())
    run(hung, EngineMode.BUSY, 21)
    run(hung, EngineMode.HUNG, 10)
    out["hung_after_work.txt"] = text(hung, 2, 31)
    idle = SglangEngine.started(SglangOptions())
    run(idle, EngineMode.BUSY, 21)
    run(idle, EngineMode.IDLE, 10)
    out["idle_after_work.txt"] = text(idle, 2, 31)
    run(engine, EngineMode.STUCK, 10)
    out["frozen_a.txt"] = text(engine, 4, 45)
    run(engine, EngineMode.STUCK, 5)
    out["frozen_b.txt"] = text(engine, 5, 50)
    restarted = SglangEngine.started(SglangOptions())
    run(restarted, EngineMode.IDLE, 2)
    out["restarted.txt"] = text(restarted, 1, 2, pid=5151)
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUT
    out.mkdir(parents=True, exist_ok=True)
    for name, body in pages().items():
        (out / name).write_bytes(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
