"""The simulator's llama.cpp flavour in router mode (LlamacppOptions(models=...)) must answer as llama-server b11434's
router does (tools/server/server-models.cpp): a model named by `?model=` (a POST: its body), loaded on demand unless
`autoload=false`, each request proxied to that model's child with the child's own headers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.rig.waiting import wait_for
from vllm_simulator import LlamacppOptions, Simulator

MODELS = ("alpha", "beta", "gamma")
NO_LOAD = {"autoload": "false"}


@pytest.fixture
def make_router() -> Iterator[Callable[..., Simulator]]:
    started: list[Simulator] = []

    def factory(scenario: str = "idle", **options: object) -> Simulator:
        settings = {"models": MODELS, "unloaded": ("gamma",), "reload_seconds": 0.3, **options}
        sim = Simulator(port=0, flavour="llamacpp", scenario=scenario,
                        llamacpp=LlamacppOptions(**settings)).start()  # type: ignore[arg-type]
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.stop()


def states(sim: Simulator) -> dict[str, str]:
    return {m["id"]: m["status"]["value"] for m in httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"]}


def metrics(sim: Simulator, model: str, **query: str) -> httpx.Response:
    return httpx.get(f"{sim.url}/metrics", params={"model": model, **query}, timeout=5)


def decodes(sim: Simulator, model: str) -> str:
    line = next(ln for ln in metrics(sim, model, **NO_LOAD).text.splitlines() if ln.startswith("llamacpp:n_decode"))
    return line.split()[1]


def test_metrics_needs_a_model_and_never_loads_one_with_autoload_false(make_router) -> None:
    sim = make_router()
    unnamed = httpx.get(f"{sim.url}/metrics", timeout=5)
    assert unnamed.status_code == 400 and unnamed.json() == {"error": {
        "code": 400, "message": "model name is missing from the request", "type": "invalid_request_error"}}
    assert states(sim) == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}
    refused = metrics(sim, "gamma", **NO_LOAD)
    assert refused.status_code == 400 and refused.json()["error"]["message"] == "model is not loaded"
    assert metrics(sim, "nope", **NO_LOAD).json()["error"]["message"] == "model 'nope' not found"
    assert states(sim)["gamma"] == "unloaded"
    assert httpx.get(f"{sim.url}/props", timeout=5).json()["role"] == "router"
    assert httpx.get(f"{sim.url}/health", timeout=5).json() == {"status": "ok"}


def test_each_child_has_its_own_page_and_start_instant(make_router) -> None:
    sim = make_router()
    alpha, beta = metrics(sim, "alpha", **NO_LOAD), metrics(sim, "beta", **NO_LOAD)
    assert alpha.status_code == beta.status_code == 200 and alpha.text.count("# TYPE llamacpp:") == 15
    assert alpha.headers["Process-Start-Time-Unix"] != beta.headers["Process-Start-Time-Unix"]
    assert httpx.post(f"{sim.url}/v1/completions", params=NO_LOAD, timeout=5,
                      json={"model": "beta", "prompt": "hi", "max_tokens": 3}).status_code == 200
    assert (decodes(sim, "alpha"), decodes(sim, "beta")) == ("0", "3")
    props = httpx.get(f"{sim.url}/props", params={"model": "beta", **NO_LOAD}, timeout=5).json()
    assert props["is_sleeping"] is False and props["total_slots"] == 2


def test_a_request_without_autoload_false_loads_the_model_as_a_new_process(make_router) -> None:
    sim = make_router()
    began = time.monotonic()
    loaded = metrics(sim, "gamma")
    assert loaded.status_code == 200 and time.monotonic() - began >= 0.3
    assert states(sim)["gamma"] == "loaded"
    others = {metrics(sim, name, **NO_LOAD).headers["Process-Start-Time-Unix"] for name in ("alpha", "beta")}
    assert loaded.headers["Process-Start-Time-Unix"] not in others
    assert httpx.post(f"{sim.url}/models/unload", json={"model": "gamma"}, timeout=5).json() == {"success": True}
    assert states(sim)["gamma"] == "unloaded"


def test_scenario_modes_are_per_model_and_a_sleeping_child_is_listed_so(make_router) -> None:
    sim = make_router("dp_one_frozen")  # alpha busy, beta stuck
    first = (decodes(sim, "alpha"), decodes(sim, "beta"))
    time.sleep(0.3)
    assert decodes(sim, "alpha") != first[0] and decodes(sim, "beta") == first[1]
    sleepy = make_router(sleep_idle_seconds=0.4)
    asleep = {"alpha": "sleeping", "beta": "sleeping", "gamma": "unloaded"}  # each after its 0.4 s idle
    wait_for("both loaded children asleep", lambda: states(sleepy) == asleep, 60, interval=0.1,
             diag=lambda: str(states(sleepy)))
    assert metrics(sleepy, "alpha", **NO_LOAD).status_code == 200 and states(sleepy)["alpha"] == "sleeping"


def test_its_engines_are_its_models() -> None:
    options = LlamacppOptions(models=MODELS)
    assert Simulator(flavour="llamacpp", llamacpp=options).engines == 3
    with pytest.raises(ValueError, match="has 3 engines"):
        Simulator(flavour="llamacpp", llamacpp=options, engines=2)
    with pytest.raises(ValueError, match="has 1 engine"):
        Simulator(flavour="llamacpp", engines=2)
