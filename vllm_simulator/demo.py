"""`tox -e demo`: check_vllm against the built-in simulator in every scenario, no GPU needed.

Each scenario shows the exact Nagios output and exit code, and how many inference requests the
check sent. The saturated scenario also runs the classic "send a chat request and wait" check,
scaled down to seconds, to show the false alarm this project exists to prevent. Then the other
engines on their own terms: llama.cpp's llama-server (its metrics off, its sleep, its 6-digit page)
and SGLang (gauges written only now and then, so a frozen scheduler is told by the probe).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import NamedTuple

import httpx

from check_vllm.contract.vocab import CODE_NAMES
from vllm_simulator import BY_NAME, LlamacppOptions, Simulator

FAST = ("--min-gap", "0.5", "--reread-delay", "0.6", "--stuck-seconds", "0", "--probe-timeout", "2", "-t", "6")


class Step(NamedTuple):
    """One scenario of the tour; what it stands for comes from the simulator's scenario table."""

    scenario: str
    runs: int = 1  # check runs to show: a verdict that needs a history needs several
    from_busy: bool = False  # enter it from a healthy busy baseline the check has seen (stuck, restarted)


#: The tour, in the order shown; multiprocess and http_502 are left out, they would look like busy and http_500.
STEPS = (
    Step("idle"),
    Step("busy", 2),
    Step("long_prefill", 2),
    Step("stuck", 3, from_busy=True),
    Step("hung_idle"),
    Step("dp_one_frozen", 3),
    Step("restarted", from_busy=True),
    Step("sleeping"),
    Step("paused", 3, from_busy=True),
    Step("engine_dead", from_busy=True),
    Step("no_metrics"),
    Step("html"),
    Step("http_500"),
    Step("slow"),
    Step("dead"),
)


class EngineStep(NamedTuple):
    """One step of another engine's tour: its own server (a flag is no scenario), in a scenario of the table."""

    engine: str  # as the output names it
    flavour: str  # the simulator's
    name: str
    description: str
    scenario: str = "idle"
    runs: int = 1
    from_busy: bool = False
    options: LlamacppOptions | None = None
    idle_first: float = 0.0  # seconds it is left idle before the first run (to fall asleep)


_llamacpp = partial(EngineStep, "llama.cpp", "llamacpp")
_sglang = partial(EngineStep, "SGLang", "sglang")

#: llama.cpp's tour: the cases where its server differs from vLLM's.
LLAMACPP_STEPS = (
    _llamacpp("idle", "nothing to do: the check sends a 1-token probe"),
    _llamacpp("busy", "both slots decoding, requests deferred: n_decode_total moving", "busy", 2),
    _llamacpp("stuck", "the loop stopped inside a decode: /metrics and /health still answer, frozen", "stuck", 3,
              from_busy=True),
    _llamacpp("metrics off", "started without --metrics: /metrics answers 501",
              options=LlamacppOptions(metrics=False)),
    _llamacpp("asleep", "--sleep-idle-seconds 1, idle for longer: the model unloaded (/props is_sleeping)",
              options=LlamacppOptions(sleep_idle_seconds=1.0), idle_first=1.3),
    _llamacpp("six digits", "busy after 1.2e9 decodes, --no-slots: n_decode_total prints 1.2e+09 and shows no step",
              "busy", 2, options=LlamacppOptions(initial_decodes=1_200_000_000, slots=False)),
    _llamacpp("router", "--models-dir: alpha and beta loaded, gamma not; beta stops inside a decode (never loads gamma)",
              "dp_one_frozen", 3, from_busy=True, options=LlamacppOptions(models=("alpha", "beta", "gamma"),
                                                                           unloaded=("gamma",))),
)
#: SGLang's tour: its work gauges lag (written after a batch, every 40 decode steps), its counters do not.
SGLANG_STEPS = (
    _sglang("idle", "nothing to do: the check sends a 1-token probe (never its /health, itself a generation)"),
    _sglang("busy", "decoding, requests queued: its pass counters moving", "busy", 2),
    _sglang("stuck", "the scheduler frozen, its gauges as last written: the probe tells", "stuck", 3, from_busy=True),
)
#: Each other engine's tour, with its heading.
TOURS = (
    ("llama.cpp simulator (llama-server b11434, --parallel 2), a new server for each step", LLAMACPP_STEPS),
    ("SGLang simulator (0.5.23, as its source has it), a new server for each step", SGLANG_STEPS),
)


def _check(url: str, state_dir: str, *extra: str) -> tuple[int, str]:
    argv = [sys.executable, "-m", "check_vllm", "-u", url, "--state-dir", state_dir, *FAST, *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stdout.strip()


def classic_probe(url: str, timeout: float) -> tuple[str, float]:
    """What the old way does: a real chat request, restart the server if it does not answer in time."""
    started = time.monotonic()
    try:
        httpx.post(f"{url}/v1/chat/completions", timeout=timeout,
                   json={"model": "tiny-llama", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 8})
    except httpx.TimeoutException:
        return f"CRITICAL - chat request timed out after {timeout:g} s -> restart vLLM", time.monotonic() - started
    except httpx.HTTPError as err:
        return f"CRITICAL - chat request failed: {err}", time.monotonic() - started
    return "OK - chat request answered", time.monotonic() - started


def _show(server: Simulator, state_dir: str, runs: int) -> None:
    """Run the check ``runs`` times and print each output, then the inference requests it sent."""
    for _ in range(runs):
        code, out = _check(server.url, state_dir)
        print(f"$ check_vllm -u {server.url}\n{out}\n-> exit {code} ({CODE_NAMES[code] if 0 <= code < len(CODE_NAMES) else '?'})")
        time.sleep(0.6)
    print(f"   inference requests the check sent: {len(server.inference_requests())}")


def engine_tour(tmp: str, heading: str, steps: tuple[EngineStep, ...]) -> None:
    """Another engine's steps, each on a new server of its flavour."""
    print(f"\n{heading}\n")
    for n, step in enumerate(steps):
        state_dir = f"{tmp}/{step.flavour}-{n}"
        with Simulator(flavour=step.flavour, scenario="busy" if step.from_busy else step.scenario,
                       llamacpp=step.options) as sim:
            if step.from_busy:
                _check(sim.url, state_dir)  # a healthy busy baseline first
                time.sleep(0.6)
                sim.set_scenario(step.scenario)
            time.sleep(step.idle_first)
            sim.clear_requests()
            print(f"== {step.engine} {step.name}: {step.description}")
            _show(sim, state_dir, step.runs)
            if step.options is not None and step.options.sleep_idle_seconds is not None:
                asleep = httpx.get(f"{sim.url}/props", timeout=5).json()["is_sleeping"]
                print(f"   GET /props is_sleeping after the runs: {str(asleep).lower()}")
            if step.options is not None and step.options.models:
                listed = httpx.get(f"{sim.url}/v1/models", timeout=5).json()["data"]
                print(f"   GET /v1/models after the runs: {', '.join(m['id'] + ' ' + m['status']['value'] for m in listed)}")
            print()


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__).parse_args(argv)
    del args
    started = time.monotonic()
    dp = BY_NAME["dp_one_frozen"]
    with tempfile.TemporaryDirectory() as tmp, Simulator(scenario="idle", slow_seconds=30) as sim, \
            Simulator(scenario=dp.name, engines=dp.min_engines) as dp_sim:
        print(f"vLLM simulator on {sim.url} (2 request slots, like --max-num-seqs 2)\n")
        for n, step in enumerate(STEPS):
            state_dir = f"{tmp}/{n}"
            entry = BY_NAME[step.scenario]
            # a server never changes its engine count, so the multi-engine scenario has its own
            server = dp_sim if entry.min_engines > 1 else sim
            if server is sim:
                sim.set_scenario("busy" if step.from_busy else entry.name)
            if step.from_busy:
                _check(sim.url, state_dir)  # a healthy busy baseline first
                time.sleep(0.6)
                sim.set_scenario(entry.name)
            server.clear_requests()
            print(f"== {entry.name}: {entry.description}")
            _show(server, state_dir, step.runs)
            print()

        print("== saturated: check_vllm vs the classic probe-style check (a chat request, 3 s timeout)")
        sim.set_scenario("busy")
        sim.clear_requests()
        t0 = time.monotonic()
        code, out = _check(sim.url, f"{tmp}/sat")
        ours = time.monotonic() - t0
        ours_requests = len(sim.inference_requests())
        verdict, theirs = classic_probe(sim.url, 3.0)
        print(f"check_vllm   ({ours:.1f} s, {ours_requests} inference requests): {out.split(' | ')[0]}")
        print(f"classic probe ({theirs:.1f} s, 1 inference request that waited for a slot): {verdict}")
        print("The classic check would restart a healthy, fully loaded server and fail every request in flight.")
        for heading, steps in TOURS:
            engine_tour(tmp, heading, steps)
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
