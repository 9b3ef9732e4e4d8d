"""``vllm-simulator`` / ``python -m vllm_simulator``: the simulator as a process, for tests that need one.

Subprocess tests (the monitoring tier, the Netdata collector) steer it over ``/_sim/`` and stop it with
SIGTERM; the first line on stdout tells them the URL.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from . import flavours
from .core import DEFAULT_BUSY_QUEUE_SECONDS, Simulator
from .llamacpp_engine import LlamacppOptions
from .scenarios import SCENARIOS, TABLE
from .sglang_engine import SglangOptions


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="vllm-simulator",
        description="A vLLM look-alike server (metrics, models, completions) for testing check_vllm.",
        epilog="scenarios:\n" + "\n".join(f"  {entry.name:<14} {entry.description}" for entry in TABLE),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (default 8000)")
    parser.add_argument("--scenario", default="idle", choices=SCENARIOS)
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines (default 1)")
    parser.add_argument("--max-num-seqs", type=int, default=2, help="request slots per engine (default 2)")
    parser.add_argument("--legacy", action="store_true", help="vLLM 0.6-0.9 (V0) metric names, no engine label")
    parser.add_argument("--multiprocess", action="store_true",
                        help="prometheus multiprocess mode: no process_* metrics, no _created samples")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--slow-seconds", type=float, default=10.0,
                        help="delay of /metrics in scenario slow (default 10)")
    parser.add_argument("--busy-queue-seconds", type=float, default=DEFAULT_BUSY_QUEUE_SECONDS,
                        help="how long a real request queues in scenario busy before it is served (default 30)")
    parser.add_argument("--flavour", default="vllm", choices=flavours.NAMES,
                        help="whose server to look like: " + "; ".join(f"{row.name}: {row.description}"
                                                                       for row in flavours.TABLE))
    parser.add_argument("--watchdog-timeout", type=float, default=SglangOptions.watchdog_timeout,
                        help="sglang: seconds stuck with a batch before the watchdog kills the server (default 300)")
    parser.add_argument("--skip-server-warmup", action="store_true",
                        help="sglang: start without the warmup request, so no batch has run yet")
    parser.add_argument("--no-metrics", action="store_true",
                        help="llamacpp: started without --metrics, so /metrics answers 501")
    parser.add_argument("--no-slots", action="store_true", help="llamacpp: --no-slots, so /slots answers 501")
    parser.add_argument("--sleep-idle-seconds", type=float, default=None,
                        help="llamacpp: sleep (unload the model) after that many seconds without a task")
    parser.add_argument("--models", default="", help="llamacpp: router mode over these models (comma-separated)")
    parser.add_argument("--unloaded", default="", help="llamacpp router: models listed but not loaded at start")
    parser.add_argument("--initial-decodes", type=int, default=0,
                        help="llamacpp: start as a process that already made that many decodes (6-digit rounding)")
    return parser.parse_args(argv)


def _names(listed: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in listed.split(",") if name.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``vllm-simulator``: serve until SIGTERM or SIGINT, then exit 0."""
    args = _parse_args(argv)
    try:
        sim = Simulator(
            scenario=args.scenario,
            engines=args.engines,
            max_num_seqs=args.max_num_seqs,
            legacy=args.legacy,
            multiprocess=args.multiprocess,
            model=args.model,
            slow_seconds=args.slow_seconds,
            host=args.host,
            port=args.port,
            busy_queue_seconds=args.busy_queue_seconds,
            flavour=args.flavour,
            sglang=SglangOptions(watchdog_timeout=args.watchdog_timeout, skip_server_warmup=args.skip_server_warmup),
            llamacpp=LlamacppOptions(metrics=not args.no_metrics, slots=not args.no_slots,
                                     sleep_idle_seconds=args.sleep_idle_seconds, initial_decodes=args.initial_decodes,
                                     models=_names(args.models), unloaded=_names(args.unloaded)),
        )
        sim.start()
    except (ValueError, OSError) as exc:
        print(f"vllm-simulator: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    print(f"vllm-simulator listening on {sim.url} scenario={sim.scenario}", flush=True)
    while not done.wait(0.5):
        pass
    sim.stop()
    return 0
