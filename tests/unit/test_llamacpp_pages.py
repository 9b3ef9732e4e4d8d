"""The /metrics pages recorded from a real llama.cpp llama-server (b11434, tests/fixtures/real/llamacpp/, its
README says how), through the pure functions: the page read by llama.cpp's row (check_vllm.contract.engines), then
judged by the same judge as vLLM's, carrying the memory page after page (issue 40, first step)."""

from __future__ import annotations

import pytest

from check_vllm.contract.defaults import Settings
from check_vllm.contract.engines import LLAMA_CPP as LLAMA_CPP_ROW
from check_vllm.contract.engines import VLLM
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.judge.assess import assess
from check_vllm.server.reading import RESTRICTABLE, NotMetrics, parse
from tests.rig.pages import LLAMA_CPP, REAL, llamacpp_page

SETTINGS = Settings(stuck_seconds=0, min_gap=0)


def engine(name: str):
    reading = parse(llamacpp_page(name))
    assert list(reading.engines) == [""], "llama.cpp's page is one engine, without labels"
    return reading.engines[""]


def test_the_pages_are_the_real_servers():
    readme = (LLAMA_CPP / "README.md").read_text()
    assert "recorded from a real `llama-server`" in readme and "build 11434" in readme
    assert not any(name.startswith("llamacpp:") for name in RESTRICTABLE), "the restricted page is vLLM's only"


def test_work_and_progress_come_from_the_rows_families():
    idle, busy_1, busy_2 = engine("idle"), engine("busy-1"), engine("busy-2")
    assert (idle.running, idle.waiting, idle.steps) == (0, 0, 0)
    assert (busy_1.running, busy_2.running) == (2, 2)
    # n_decode_total moves on every decode; tokens_predicted_total only when a request ends, so it is not read
    assert busy_2.steps > busy_1.steps and busy_1.generation_tokens is None
    assert busy_1.created is None and busy_1.kv_cache is None


def judged(*names: str) -> list[str]:
    memory, words = Memory(), []
    for i, name in enumerate(names):
        verdict = assess(memory, parse(llamacpp_page(name)), SETTINGS, Instant(1000.0 + 10 * i))
        memory = verdict.memory
        words.append(verdict.word)
    return words


def test_busy_while_it_decodes():
    assert judged("busy-1", "busy-2")[1] == "busy"


def test_the_decode_loop_stopped_is_stalling_then_stuck_on_the_same_proof_as_vllm():
    # stall-before -> stalled-1 moved by one decode; stalled-1 -> stalled-2: 2 processing, n_decode_total frozen
    assert judged("stall-before", "stalled-1", "stalled-2", "stalled-2") == ["busy", "busy", "stalling", "stuck"]


def test_a_stall_that_resumes_is_busy_again():
    assert judged("stall-before", "stalled-1", "stalled-2", "stall-resumed")[-1] == "busy"


@pytest.mark.parametrize("before", ["busy-2", "idle-after"])
def test_a_restart_shows_as_every_counter_back_to_zero(before):
    assert judged(before, "restarted")[-1] == "restarted"


def test_the_reading_says_whose_page_it_is_and_a_named_engine_reads_only_its_own():
    assert parse(llamacpp_page("idle")).engine == LLAMA_CPP_ROW.key == "llamacpp"
    assert parse(llamacpp_page("idle"), LLAMA_CPP_ROW).engine == "llamacpp"
    vllm_page = (REAL / "idle.txt").read_text()
    assert parse(vllm_page).engine == VLLM.key
    with pytest.raises(NotMetrics, match="no llamacpp: "):
        parse(vllm_page, LLAMA_CPP_ROW)
    with pytest.raises(NotMetrics, match="no vllm: "):
        parse(llamacpp_page("busy-1"), VLLM)


def test_llamacpps_server_is_asked_no_route_of_vllms():
    """llama.cpp serves no pause, fault or checkpoint route, and its /health proves nothing of the engine (its
    HTTP thread answers it while the decode loop is stopped): none is ever asked of it."""
    routes = LLAMA_CPP_ROW.routes
    assert not (routes.metrics_filter or routes.paused or routes.faults or routes.checkpoint or routes.engine_dead)
    assert VLLM.routes.paused == "/is_paused" and VLLM.routes.metrics_filter
