"""SGLang 0.5.23's /metrics pages as the simulator's SGLang flavour renders them from SGLang's source
(tests/fixtures/source/sglang-0.5.23/: from source, not run), read by SGLang's row and judged by the same judge:
its counters prove progress; its work gauges lag, so work they show with nothing moving is no proof of work, and
the idle probe tells idle from hung (issue 40)."""

from __future__ import annotations

from pathlib import Path

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.engines import SGLANG
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.vocab import PROBE
from check_vllm.judge.assess import assess
from check_vllm.server.reading import parse

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "source" / "sglang-0.5.23"
SETTINGS = Settings(stuck_seconds=0, min_gap=0)


def read(name: str):
    return parse((PAGES / f"{name}.txt").read_text())


def judged(*names: str) -> list[tuple[str, str | None]]:
    memory, out = Memory(), []
    for i, name in enumerate(names):
        verdict = assess(memory, read(name), SETTINGS, Instant(1000.0 + 10 * i))
        memory = verdict.memory
        out.append((verdict.word, verdict.action))
    return out


def test_the_pages_say_they_are_from_source_not_run():
    assert "from source, not run" in (PAGES / "README.md").read_text()


def test_sglangs_row_reads_its_counters_and_lagging_gauges():
    busy = read("busy_a")
    assert busy.engine == SGLANG.key and list(busy.engines) == [""]
    (e,) = busy.engines.values()
    assert (e.running, e.waiting) == (1, 3) and e.lagging_gauges and e.live_work == 0
    # cuda_graph_passes_total summed over its modes; realtime_tokens_total split by mode
    assert e.steps == 1007 + 21 and (e.generation_tokens, e.prompt_tokens) == (2007, 4006)
    assert e.created == 4242, "the pid on its per-process gauge names the process that owns the counters"


def test_a_fresh_page_without_gauges_or_counters_is_read_not_refused():
    fresh = read("idle_fresh")
    assert fresh.engine == SGLANG.key and fresh.work == 0


def test_busy_by_its_counters():
    assert judged("busy_a", "busy_b")[-1] == ("busy", None)


@pytest.mark.parametrize("pages", [("busy_b", "frozen_a", "frozen_b"), ("hung_after_work", "hung_after_work")])
def test_gauges_showing_work_with_nothing_moving_prove_nothing_the_probe_tells(pages):
    assert judged(*pages)[-1] == ("idle", PROBE)


def test_a_first_reading_never_probes_on_a_gauge_that_may_lag():
    """No baseline: even a page whose gauges say no work gets a second reading before any probe."""
    assert judged("idle_fresh")[0] == ("busy", "reread")


def test_a_restart_shows_as_a_new_owner_or_counters_back():
    assert judged("busy_b", "restarted")[-1][0] == "restarted"
