"""Fixtures for the real_vllm tier: a REAL vLLM CPU server serving a tiny locally generated model.

Run with:  python -m pytest tests/real_vllm -m real_vllm -q -p no:cacheprovider
(setup.cfg's addopts deselects real_vllm by default, so `-m real_vllm` is required.)

Policy: nothing here skips. If vLLM cannot be installed (.ci/vllm-env.sh), the model cannot be generated,
or the server does not start, every test using `vllm_server` FAILS with the reason and the log tail.
The first run installs vLLM into a cached venv (~2 min, ~3.4 GB); later runs reuse it (< 1 s).
The server runs under the machine's heavy lock (tests/rig/heavy_lock.py), as in every real-vLLM tier.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.rig.heavy_lock import HeavyLock
from tests.rig.tiers import mark_tier
from tests.rig.vllm_server import (
    CACHE_DIR,
    VllmServer,
    VllmSetupError,
    VllmStartError,
    ensure_tiny_model,
    ensure_venv,
    free_port,
)

HERE = Path(__file__).resolve().parent
TIMINGS: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_tier(items, HERE, "real_vllm")
    # Tests that leave the session server dead (marked real_vllm_last) run after every other test.
    items.sort(key=lambda item: item.get_closest_marker("real_vllm_last") is not None)


def pytest_configure(config):
    config.addinivalue_line("markers", "real_vllm_last: kills the session's vLLM server; runs last")


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_sep("-", "real vLLM timings")
        for k, v in TIMINGS.items():
            terminalreporter.write_line(f"{k}: {v:.1f}s")


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    t0 = time.monotonic()
    try:
        venv = ensure_venv()
    except VllmSetupError as exc:
        pytest.fail(f"real vLLM tier: cannot install vLLM: {exc}", pytrace=False)
    TIMINGS["vllm venv (.ci/vllm-env.sh)"] = time.monotonic() - t0
    return venv


@pytest.fixture(scope="session")
def tiny_model(vllm_venv) -> Path:
    t0 = time.monotonic()
    try:
        model = ensure_tiny_model(vllm_venv)
    except VllmSetupError as exc:
        pytest.fail(f"real vLLM tier: cannot generate the tiny model: {exc}", pytrace=False)
    TIMINGS["tiny model (generate or cache)"] = time.monotonic() - t0
    return model


@pytest.fixture(scope="session")
def heavy():
    """The machine's real-vLLM lock, for as long as the session's server lives."""
    with HeavyLock(say=lambda msg: print(msg, flush=True)) as lock:
        TIMINGS[f"heavy lock ({lock.how})"] = lock.waited
        yield


@pytest.fixture(scope="session")
def vllm_server(heavy, vllm_venv, tiny_model):
    """A started VllmServer (tiny-llama, --max-num-seqs 2) on a free loopback port, stopped at the end. In dev
    mode (VLLM_SERVER_DEV_MODE=1: /pause, /resume, /is_paused, as RL trainers run it), which changes nothing else
    the tests read."""
    log_dir = CACHE_DIR / "logs"
    port = free_port()
    srv = VllmServer(vllm_venv, tiny_model, port=port, max_num_seqs=2,
                     log_path=log_dir / f"vllm-{port}.log", extra_env={"VLLM_SERVER_DEV_MODE": "1"})
    try:
        srv.start(timeout=240)
    except VllmStartError as exc:
        pytest.fail(f"real vLLM tier: server did not start: {exc}", pytrace=False)
    TIMINGS["vllm server start-up to /health 200"] = srv.start_seconds or 0.0
    try:
        yield srv
    finally:
        t0 = time.monotonic()
        srv.stop()
        TIMINGS["vllm server stop"] = time.monotonic() - t0
