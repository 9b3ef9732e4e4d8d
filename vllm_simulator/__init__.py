"""A vLLM look-alike HTTP server for tests and demos.

check_vllm has to tell a busy vLLM server from a stuck one, and the only honest way to test that is against
something that behaves like vLLM on the wire: a real TCP socket, a Prometheus page with vLLM's metric names
rendered by prometheus_client (the same library the check parses with), a slot limit so that an inference
probe really waits in the queue behind background work, and counters that move (or do not) the way they do
on a real engine. Scenarios switch that behaviour at run time, in process (``Simulator.set_scenario``) or over
HTTP (``POST /_sim/scenario``) when the simulator runs as a subprocess (``vllm-simulator`` /
``python -m vllm_simulator``).

Every scenario is one row of ``scenarios.TABLE``; the code reads the row's fields, never the name. Counters
advance lazily: every read of ``/metrics`` and every state change first credits each engine with the work it
would have done since the previous advance, at fixed rates, under the scenario that was in force. That keeps
the simulator free of background threads and makes "how much moved in 0.2 s" predictable for tests.

Nothing here is meant for production; it only depends on the standard library and prometheus_client.

Modules: ``scenarios`` (the table), ``engine`` (one engine's counters and rates), ``process`` (the simulated
process behind the lock), ``vllm_families`` and ``page`` (the /metrics page), ``openai_api`` (request and
response bodies), ``handler``, ``control`` and ``listener`` (HTTP, the ``/_sim/`` endpoints and the socket),
``face`` (what those use of the simulator), ``core`` (``Simulator``), ``cli``.

``Simulator(flavour="sglang")`` (``--flavour sglang``) answers as SGLang 0.5.23 does instead, read from its source:
``sglang_engine`` (what a scheduler counts and when it writes its gauges), ``sglang_series``, ``sglang_families``
and ``sglang_page`` (the multiprocess-mode page), ``sglang_server`` and ``sglang_routes`` (pause, health, watchdog).

``Simulator(flavour="llamacpp", llamacpp=LlamacppOptions(...))`` (``--flavour llamacpp``) answers as llama.cpp's
llama-server b11434 does, read from its source and checked against pages recorded from it: ``llamacpp_engine``
(its counters), ``llamacpp_page`` (the hand-written 6-digit page), ``llamacpp_server`` (its identity and its sleep
after --sleep-idle-seconds), ``llamacpp_api`` and ``llamacpp_routes`` (501 without --metrics, /props, /slots),
``llamacpp_router`` (router mode, ``LlamacppOptions(models=...)``: a child server per model, loaded on demand).
Each flavour is a row of ``flavours.TABLE``: the simulator builds the row's pieces and never asks which it is.
"""

from __future__ import annotations

from .cli import main
from .core import Simulator
from .engine import (
    GENERATION_TOKENS_PER_SLOT_SECOND,
    PROMPT_TOKENS_PER_ENGINE_SECOND,
    STEPS_PER_SLOT_SECOND,
)
from .llamacpp_engine import LlamacppOptions
from .process import RecordedRequest
from .scenarios import BY_NAME, SCENARIOS, TABLE, EngineMode, MetricsAnswer, Scenario
from .sglang_engine import SglangOptions

__all__ = [
    "BY_NAME",
    "GENERATION_TOKENS_PER_SLOT_SECOND",
    "PROMPT_TOKENS_PER_ENGINE_SECOND",
    "SCENARIOS",
    "STEPS_PER_SLOT_SECOND",
    "TABLE",
    "EngineMode",
    "LlamacppOptions",
    "MetricsAnswer",
    "RecordedRequest",
    "Scenario",
    "Simulator",
    "SglangOptions",
    "main",
]
