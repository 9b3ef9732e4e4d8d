"""Replay the /metrics pages recorded from a REAL server of EVERY release in the matrix (tests/fixtures/real/
<release>/, written by tests/real_vllm_matrix/record.py; 0.32.0's are tests/fixtures/real/*.txt), so a change
that breaks one release's reading shows here, without vLLM:

- through the pure functions: `reading.parse` + `judge.assess`, page after page, carrying the memory;
- end to end: tests/e2e/test_recorded_pages.py, the installed check against a loopback server handing them out.

Each release must read as it was recorded: idle (and probe), busy, busy -> stalling -> stuck once frozen,
restarted after the restart.
"""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from check_vllm.judge.assess import assess
from check_vllm.server.reading import parse
from tests.rig.pages import DIRS, NAMES, REAL, RELEASE_DIRS, RELEASES


def test_every_matrix_release_has_recorded_pages():
    assert len(RELEASE_DIRS) >= 4, f"no per-release pages under {REAL}: run tests/real_vllm_matrix/record.py"
    for d in RELEASE_DIRS:
        missing = [n for n in NAMES if not (d / f"{n}.txt").is_file()]
        assert not missing, f"{d}: missing {missing}"


class Pages:
    def __init__(self, release: str):
        self.release = release
        self.text = {n: (DIRS[release] / f"{n}.txt").read_text() for n in NAMES}
        self.read = {n: parse(t) for n, t in self.text.items()}
        # judge after every recorded process started (the restart text says how long ago)
        self.t0 = max(r.process_start or 0.0 for r in self.read.values()) + 60.0

    def chain(self, names: list[str], settings: Settings, step: float = 2.0) -> list[Verdict]:
        memory, out = Memory(), []
        for i, n in enumerate(names):
            v = assess(memory, self.read[n], settings, self.t0 + i * step)
            memory = v.memory
            out.append(v)
        return out


@pytest.fixture(scope="module", params=RELEASES)
def pages(request) -> Pages:
    return Pages(request.param)


# --------------------------------------------------------------------------- the pure functions

def test_idle_page_reads_one_engine_no_work_and_asks_for_the_probe(pages: Pages):
    r: Reading = pages.read["idle"]
    assert len(r.engines) == 1 and r.model == "tiny-llama", (r.engines.keys(), r.model)
    (e,) = r.engines.values()
    assert (r.work, e.running, e.waiting) == (0, 0, 0)
    assert e.finished == 1 and e.generation_tokens == 1 and e.steps == 1  # the recorder's one completion
    assert e.kv_cache is not None and e.asleep is False
    v = assess(Memory(), r, Settings(), pages.t0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")


def test_saturated_pages_are_busy_with_rates(pages: Pages):
    first, second = pages.chain(["saturated", "saturated_b"], Settings())
    assert (first.word, first.action) == ("busy", "reread")  # no baseline: read again, never guess
    assert (second.word, second.code, second.action) == ("busy", OK, None)
    assert second.tokens_per_second > 0 and second.steps_per_second > 0
    assert second.running == 2 and second.waiting >= 1


def test_frozen_pages_go_busy_stalling_stuck(pages: Pages):
    fast = Settings(stuck_seconds=0.0)
    vs = pages.chain(["saturated", "saturated_b", "frozen_a", "frozen_b", "frozen_b"], fast)
    assert [(v.word, v.code) for v in vs][-2:] == [("stalling", WARNING), ("stuck", CRITICAL)], \
        [v.summary for v in vs]
    assert all(v.word == "busy" for v in vs[:3]), [v.summary for v in vs]
    assert vs[-1].tokens_per_second == 0 and vs[-1].running == 2


def test_frozen_pages_need_the_seconds_too(pages: Pages):
    vs = pages.chain(["frozen_a", "frozen_b", "frozen_b"], Settings())  # stuck_seconds 120
    assert [v.word for v in vs] == ["busy", "stalling", "stalling"]
    late = assess(vs[-1].memory, pages.read["frozen_b"], Settings(), pages.t0 + 4 + 120)
    assert (late.word, late.code) == ("stuck", CRITICAL)


def test_restarted_page_is_a_new_process_never_compared(pages: Pages):
    before, after = pages.chain(["saturated", "restarted"], Settings())
    assert (after.word, after.code, after.action) == ("restarted", OK, "probe"), after.summary
    assert after.tokens_per_second is None and after.steps_per_second is None
    again = assess(after.memory, pages.read["restarted"], Settings(), pages.t0 + 4)
    assert again.word == "idle"


# --------------------------------------------------------------------------- data parallel (multiprocess mode)

DP = REAL / "0.32.0-dp2"


def test_data_parallel_warm_page_reads_two_idle_engines_without_process_metrics():
    r = parse((DP / "warm.txt").read_text())
    assert sorted(r.engines) == ["0", "1"] and r.work == 0
    assert r.process_start is None and all(e.created is None for e in r.engines.values())
    v = assess(Memory(), r, Settings(), 2_000_000_000.0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")


def test_data_parallel_fresh_page_reads_idle():
    """A fresh multiprocess page has counters (all zero) but no request gauges until an engine's first
    request: an engine that has served nothing has no work, so the page reads idle (the check probes)."""
    r = parse((DP / "fresh.txt").read_text())
    assert sorted(r.engines) == ["0", "1"] and r.work == 0
    v = assess(Memory(), r, Settings(), 2_000_000_000.0)
    assert (v.word, v.code, v.action) == ("idle", OK, "probe")
