"""llama-server started with --api-key (issue 52): it guards every route but /health, /v1/health, /models,
/v1/models and /api/tags (tools/server/server-http.cpp public_endpoints), /metrics included. The check sends the
key on every request it makes, so a guarded server is read and a hang proven exactly as an open one; without the
key, or with a wrong one, the status says so, never "metrics off"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.vocab import OK, WARNING
from tests.e2e.test_llamacpp_sim import STUCK, assert_warned_then_stuck, until_critical
from tests.rig.scripts import FAST
from vllm_simulator import LlamacppOptions, Simulator

KEY = "sk-llama-guarded-0123"


@pytest.fixture
def guarded() -> Iterator[Simulator]:
    sim = Simulator(port=0, flavour="llamacpp", scenario="busy", llamacpp=LlamacppOptions(api_key=KEY)).start()
    try:
        yield sim
    finally:
        sim.stop()


def key_file(tmp_path: Path, key: str) -> str:
    path = tmp_path / "key"
    path.write_text(key + "\n")
    path.chmod(0o600)
    return str(path)


def test_a_hung_guarded_server_is_proven_stuck_with_the_key(guarded, run_check, tmp_path):
    key = ("--api-key-file", key_file(tmp_path, KEY))
    time.sleep(0.3)
    first = run_check("-u", guarded.url, *FAST, *STUCK, *key)
    assert (first.code, first.word) == (OK, "busy") and first.first.startswith("LLAMACPP OK - busy"), first.out
    guarded.set_scenario("stuck")
    assert_warned_then_stuck(until_critical(guarded, run_check, *STUCK, *key))
    assert len([r for r in guarded.requests() if r.path.startswith("/metrics")]) >= 3  # read at every run


def test_without_the_key_the_status_says_the_key_is_needed(guarded, run_check):
    r = run_check("-u", guarded.url, *FAST)
    assert r.code == WARNING and "/metrics answered HTTP 401: the server needs an API key (--api-key-file)" in r.first, \
        r.out
    assert "metrics off" not in r.out and "--metrics" not in r.first, r.out
    # no page says whose server it is; its model list does (owned_by "llamacpp"): named so, not VLLM
    assert r.first.startswith("LLAMACPP WARNING - no metrics: "), r.out


def test_a_wrong_key_is_said_refused(guarded, run_check, tmp_path):
    r = run_check("-u", guarded.url, *FAST, "--api-key-file", key_file(tmp_path, "sk-wrong-key-9999"))
    assert r.code == WARNING and "/metrics answered HTTP 401: the API key was refused" in r.first, r.out
    assert "sk-wrong-key-9999" not in r.out


def test_the_shipped_startup_probe_passes_llamacpp_without_metrics(run_check):
    """llama.cpp's default (no --metrics): `no metrics` for ever, which the shipped startup probe failed for ever
    (the kubelet then kills a healthy server every failureThreshold x periodSeconds). Its model list says it has
    loaded: startup passes; liveness passes; the check itself still warns."""
    sim = Simulator(port=0, flavour="llamacpp", scenario="idle", llamacpp=LlamacppOptions(metrics=False)).start()
    try:
        start = run_check("--probe", "startup", "-u", sim.url, *FAST)
        assert start.code == 0 and start.first.startswith("startup pass in spite of: WARNING no metrics: "), start.out
        assert start.first.endswith("(it lists its model: loaded)"), start.out
        assert run_check("--probe", "liveness", "-u", sim.url, *FAST).code == 0
        assert run_check("-u", sim.url, *FAST).code == WARNING
    finally:
        sim.stop()
