"""check_vllm benchmarks: figures measured in one run, printed as a table of ratios (not pass/fail).

    python bench/run.py            # or: tox -e bench
    python bench/run.py --reps 31  # more repetitions, steadier medians

1. wall time of one full check run (steady state, busy simulator) vs the import floor
   `python -c "import httpx, nagiosplugin, prometheus_client.parser"` (target <= 1.3x);
2. parse time of a real-sized page with the family pre-filter vs prometheus_client alone, and of a
   data-parallel page with 8 engines;
3. saturation: latency of check_vllm vs a classic probe check (one completion, 5 s timeout) while every
   slot is taken (target: check_vllm < 1 s with zero inference requests, the probe waits);
4. requests and bytes one steady-state run exchanges (target: one GET).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import timeit
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.reading import parse
from check_vllm.simulator import Simulator

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real" / "saturated.txt"
FLOOR = [sys.executable, "-c", "import httpx, nagiosplugin, prometheus_client.parser"]
#: The same plus the transport any request loads (httpx imports httpcore and h11 only on a first client).
TRANSPORT = [sys.executable, "-c", "import sys; sys.modules.update(trio=None, anyio=None); "
             "import httpx, nagiosplugin, prometheus_client.parser, httpcore, h11"]


def check_cmd() -> list[str]:
    script = Path(sysconfig.get_path("scripts")) / "check_vllm"
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "from check_vllm.cli import main; main()"]


#: As installed: pip compiles bytecode at install time, so let the warm-up runs write it (an editable
#: checkout under PYTHONDONTWRITEBYTECODE=1 would otherwise compile check_vllm from source every run).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
    return time.perf_counter() - started


def bench_wall(reps: int, state: Path) -> dict[str, float]:
    with Simulator(scenario="busy") as sim:
        cmd = [*check_cmd(), "-u", sim.url, "--state-dir", str(state), "--min-gap", "0"]
        subprocess.run(cmd, capture_output=True, check=False)  # the baseline: later runs are steady state
        for _ in range(3):  # warm the page cache for both
            wall(FLOOR), wall(cmd)
        floor, transport, run = [], [], []
        for _ in range(reps):  # interleaved, so drift hits all alike
            floor.append(wall(FLOOR))
            transport.append(wall(TRANSPORT))
            run.append(wall(cmd))
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.split(" | ")[0]
    return {"floor": statistics.median(floor), "transport": statistics.median(transport),  # type: ignore[dict-item]
            "run": statistics.median(run), "status": out}


def med(fn, reps: int) -> float:
    number = 20
    return statistics.median(timeit.repeat(fn, number=number, repeat=reps)) / number


def bench_parse(reps: int) -> list[tuple[str, int, float, float]]:
    pages = []
    if REAL.exists():
        pages.append(("real vLLM 0.32 page (recorded)", REAL.read_text()))
    with Simulator(scenario="busy") as s1, Simulator(scenario="busy", engines=8) as s8:
        pages.append(("simulator, 1 engine", s1.metrics_text().decode()))
        pages.append(("simulator, 8 engines (data parallel)", s8.metrics_text().decode()))
    rows = []
    for name, text in pages:
        filtered = med(lambda: parse(text), reps)  # noqa: B023 - evaluated right here
        full = med(lambda: list(text_string_to_metric_families(text)), reps)  # noqa: B023
        rows.append((name, len(text), filtered, full))
    return rows


def bench_saturation(state: Path) -> dict[str, float]:
    with Simulator(scenario="busy", busy_queue_seconds=30) as sim:
        cmd = [*check_cmd(), "-u", sim.url, "--state-dir", str(state / "sat"), "--min-gap", "0"]
        subprocess.run(cmd, capture_output=True, check=False)
        sim.clear_requests()
        lat = [wall(cmd) for _ in range(5)]
        ours = len(sim.inference_requests())
        started = time.perf_counter()
        try:  # the classic check: one short completion, give up after 5 s
            httpx.post(sim.url + "/v1/completions", json={"model": sim.model, "prompt": "Hi", "max_tokens": 1},
                       timeout=5.0)
            probe_ok = 1.0
        except httpx.TimeoutException:
            probe_ok = 0.0
        probe = time.perf_counter() - started
    return {"check": statistics.median(lat), "check_inference": ours, "probe": probe, "probe_ok": probe_ok}


class Relay:
    """A byte-counting TCP relay in front of the simulator: what one check run really exchanges."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.up = self.down = self.connections = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, server, "up"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, "down"), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        try:
            while data := src.recv(65536):
                with self.lock:
                    setattr(self, way, getattr(self, way) + len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset(self) -> None:
        with self.lock:
            self.up = self.down = self.connections = 0


def bench_traffic(state: Path) -> dict[str, float]:
    with Simulator(scenario="busy") as sim:
        relay = Relay(sim.port)
        cmd = [*check_cmd(), "-u", relay.url, "--state-dir", str(state / "traffic"), "--min-gap", "0"]
        subprocess.run(cmd, capture_output=True, check=False)
        time.sleep(0.2)
        relay.reset()
        sim.clear_requests()
        runs = 5
        for _ in range(runs):
            subprocess.run(cmd, capture_output=True, check=False)
        time.sleep(0.2)
        return {"requests": len(sim.requests()) / runs, "connections": relay.connections / runs,
                "sent": relay.up / runs, "received": relay.down / runs,
                "inference": len(sim.inference_requests())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15, help="repetitions per figure (medians are reported)")
    args = ap.parse_args()
    print(f"check_vllm bench: python {sys.version.split()[0]}, {args.reps} repetitions, medians\n")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        w = bench_wall(args.reps, state / "wall")
        print("1. one full check run (steady state, busy simulator) vs the import floor")
        print(f"   floor  {w['floor'] * 1000:7.1f} ms  python -c 'import httpx, nagiosplugin, prometheus_client.parser'")
        print(f"   check  {w['run'] * 1000:7.1f} ms  {w['status']}")
        print(f"   ratio  {w['run'] / w['floor']:7.2f} x   (target <= 1.30 x)")
        print(f"   floor with the HTTP transport a request loads (httpcore, h11): {w['transport'] * 1000:.1f} ms, "
              f"check / that = {w['run'] / w['transport']:.2f} x\n")

        print("2. parse time per page: family pre-filter (check_vllm.reading.parse) vs prometheus_client alone")
        print(f"   {'page':40} {'bytes':>8} {'filtered':>10} {'full':>10} {'speed-up':>9}")
        for name, size, filtered, full in bench_parse(args.reps):
            print(f"   {name:40} {size:8d} {filtered * 1000:8.2f} ms {full * 1000:8.2f} ms {full / filtered:8.1f}x")
        print()

        s = bench_saturation(state)
        print("3. saturated server (every slot taken, a queue): check_vllm vs a classic probe check")
        print(f"   check_vllm  {s['check'] * 1000:7.0f} ms, inference requests sent: {s['check_inference']:.0f}")
        verdict = "answered" if s["probe_ok"] else "timed out: a false alarm"
        print(f"   probe       {s['probe'] * 1000:7.0f} ms, 1 completion queued behind the work, {verdict}")
        print(f"   ratio       {s['probe'] / s['check']:7.1f} x faster, and no slot used (target: < 1 s, 0 requests)\n")

        t = bench_traffic(state)
        print("4. traffic of one steady-state run (byte-counting relay in front of the simulator)")
        print(f"   {t['requests']:.1f} HTTP requests over {t['connections']:.1f} connections, "
              f"{t['sent']:.0f} bytes sent, {t['received']:.0f} bytes received, "
              f"{t['inference']:.0f} inference requests (target: one GET)")


if __name__ == "__main__":
    main()
