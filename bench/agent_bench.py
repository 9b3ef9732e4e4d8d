"""Cost of check_vllm_agent: its CPU and RSS, the server's CPU per reading, and what a connection costs.

    python bench/agent_bench.py [--seconds 30] [--interval 2] [--connections 4] [--scenario busy]

The agent runs as an operator runs it (the installed console script) against a simulator in ANOTHER process,
so each process's CPU is its own, from /proc/<pid>/stat (user + system) over windows after a warm-up:
  1. the simulator alone (its background), then the agent reading it every --interval with nobody connecting;
  2. the same with HAProxy's connections: --connections per interval (four balancers, or two balancers with
     two backend sections each), each read to the end as HAProxy does;
  3. a burst of connections (50/s) to price one connection.
Readings are counted at the simulator (its http_requests_total for /metrics). The per-connection design it
replaces would cost one reading per connection: --connections times the server CPU of one reading.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from pathlib import Path

from procstat import cpu_seconds, free_port, memory_kb

REPO = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> tuple[float, float]:
    got = memory_kb(pid)
    return got["VmRSS"] / 1024, got["VmHWM"] / 1024


def metrics_reads(url: str) -> float:
    """The simulator's own count of answered GET /metrics (the restricted page is /metrics/ too)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("http_requests_total{") and 'handler="/metrics"' in line and 'method="GET"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total  # this read itself counts once answered: the next difference includes it (subtracted there)


def connect(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        while s.recv(4096):
            pass


def window(pids: dict[str, int], seconds: float, per_second: float, port: int | None) -> dict[str, float]:
    """CPU seconds of each process over `seconds`, with `per_second` agent connections meanwhile."""
    stop = threading.Event()
    made = [0]

    def clients() -> None:
        gap = 1.0 / per_second
        nxt = time.monotonic()
        while not stop.is_set():
            connect(port)  # type: ignore[arg-type]
            made[0] += 1
            nxt += gap
            stop.wait(max(nxt - time.monotonic(), 0))

    t = threading.Thread(target=clients, daemon=True) if per_second and port else None
    before = {k: cpu_seconds(p) for k, p in pids.items()}
    t0 = time.monotonic()
    if t:
        t.start()
    time.sleep(seconds)
    stop.set()
    if t:
        t.join(10)
    out = {k: cpu_seconds(p) - before[k] for k, p in pids.items()}
    out["wall"], out["connections"] = time.monotonic() - t0, made[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=4, help="HAProxy connections per interval")
    ap.add_argument("--scenario", default="busy")
    args = ap.parse_args()

    sport, aport = free_port(), free_port()
    url = f"http://127.0.0.1:{sport}"
    sim = subprocess.Popen([sys.executable, "-m", "vllm_simulator", "--port", str(sport), "--scenario", args.scenario],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    agent_bin = Path(sysconfig.get_path("scripts")) / "check_vllm_agent"
    agent = None
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(args.warmup)
        idle = window({"sim": sim.pid}, args.seconds, 0, None)
        agent = subprocess.Popen([str(agent_bin), "--url", url, "--listen", f"127.0.0.1:{aport}",
                                  "--interval", f"{args.interval:g}"], stderr=subprocess.DEVNULL)
        time.sleep(args.warmup)
        pids = {"sim": sim.pid, "agent": agent.pid}
        r0 = metrics_reads(url)
        alone = window(pids, args.seconds, 0, None)
        r1 = metrics_reads(url)
        served = window(pids, args.seconds, args.connections / args.interval, aport)
        r2 = metrics_reads(url)
        burst = window(pids, args.seconds / 2, 50.0, aport)
        rss, peak = rss_mb(agent.pid)
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(10)
    finally:
        if agent and agent.poll() is None:
            agent.kill()
        sim.terminate()
        sim.wait(10)

    background = idle["sim"] / idle["wall"]
    reads_alone, reads_served = r1 - r0 - 1, r2 - r1 - 1
    per_read = (alone["sim"] - background * alone["wall"]) / max(reads_alone, 1)
    per_conn = (burst["agent"] - alone["agent"] / alone["wall"] * burst["wall"]) / max(burst["connections"], 1)
    print(f"check_vllm_agent benchmark: simulator scenario {args.scenario}, --interval {args.interval:g}, "
          f"windows of {args.seconds:g} s after {args.warmup:g} s warm-up")
    print(f"  readings of /metrics      {reads_alone:.0f} alone, {reads_served:.0f} while serving "
          f"{served['connections']} connections ({args.connections} per interval)")
    print(f"  agent CPU, nobody asking  {100 * alone['agent'] / alone['wall']:.2f}% of one core "
          f"({1000 * alone['agent'] / max(reads_alone, 1):.2f} ms per reading)")
    print(f"  agent CPU, HAProxy asking {100 * served['agent'] / served['wall']:.2f}% of one core")
    print(f"  agent CPU per connection  {1000 * per_conn:.3f} ms ({burst['connections']} connections at 50/s)")
    print(f"  agent RSS                 {rss:.1f} MB now, {peak:.1f} MB peak")
    print(f"  server CPU per reading    {1000 * per_read:.2f} ms (simulator; background "
          f"{100 * background:.2f}% of a core subtracted)")
    print(f"  server CPU, HAProxy asking {100 * (served['sim'] / served['wall'] - background):.2f}% of a core; a judge "
          f"per connection would read {args.connections}x as often")
    print(f"  exit code on SIGTERM      {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
