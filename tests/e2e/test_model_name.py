"""The probe asks for the model by its protocol value (issue 30, class 4).

Without --served-model-name, vLLM's model_name label and /v1/models id are the path given to `vllm serve`: an HF
snapshot under a deep mount point is longer than 200 characters and may hold spaces or `|`. Cut or folded for
display, it is a model vLLM does not serve: an instant 404, a healthy idle server WARNING for ever and a hung
one never stuck. Only what is shown is cleaned.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from check_vllm.contract.vocab import CRITICAL, OK
from check_vllm.server import api
from check_vllm.server.fetch import Endpoint
from vllm_simulator import Simulator

from .conftest import FAST

LONG = ("/mnt/shared models|team a/huggingface/hub/models--example-org--A-Very-Long-Model-Name-Instruct-v2/snapshots/"
        + "0123456789abcdef" * 10 + "/with  two spaces")


@pytest.fixture(params=["idle", "hung_idle"])
def long_named(request) -> Iterator[Simulator]:
    s = Simulator(scenario=request.param, model=LONG).start()
    try:
        yield s
    finally:
        s.stop()


def test_the_probe_asks_for_a_long_model_path_as_it_is(long_named: Simulator, run_check):
    assert len(LONG) > 200 and "|" in LONG and "  " in LONG
    if long_named.scenario == "idle":
        r = run_check("-u", long_named.url, *FAST)
        assert (r.code, r.word) == (OK, "idle"), r.out
        assert "probe answered" in r.status, r.out
        assert [q.path for q in long_named.inference_requests()] == ["/v1/completions"]
        return
    # a hung idle engine is proven stuck: the probe reaches it (no instant 404) and gets no answer
    words = [run_check("-u", long_named.url, *FAST, "--probe-timeout", "1", "--stuck-readings", "2",
                       "--stuck-seconds", "0.5").word for _ in range(3)]
    assert "stuck" in words, words
    r = run_check("-u", long_named.url, *FAST, "--probe-timeout", "1", "--stuck-readings", "2",
                  "--stuck-seconds", "0.5")
    assert r.code == CRITICAL and "404" not in r.out, r.out


def test_v1_models_gives_the_probe_the_id_as_listed():
    with Simulator(scenario="idle", model=LONG) as s, httpx.Client() as client:
        assert api.first_model(client, Endpoint(s.url), 5) == LONG
