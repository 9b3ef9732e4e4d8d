"""Cost of the Netdata plugin: CPU time per tick per job and RSS, N jobs at update_every 1.

    python bench/netdata_bench.py [--jobs 10] [--seconds 30] [--scenario busy]

The plugin runs as Netdata runs it (the installed vllm.plugin launcher, argv[1] = 1, its jobs from
$NETDATA_USER_CONFIG_DIR/vllm.conf), against one simulator in ANOTHER process so the simulator's own
work is not counted. CPU comes from /proc/<pid>/stat (user + system) over a window after a warm-up;
ticks are counted from the state blocks the plugin wrote in that window. Targets (issue 6): all jobs
together under 2% of one core, and under 60 MB RSS.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from procstat import cpu_seconds, free_port, memory_kb  # noqa: E402

from check_vllm.netdata.install import install  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--scenario", default="busy")
    args = ap.parse_args()

    port = free_port()
    sim = subprocess.Popen([sys.executable, "-m", "vllm_simulator", "--port", str(port), "--scenario",
                            args.scenario], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            size = len(urllib.request.urlopen(url + "/metrics", timeout=1).read())
            break
        except OSError:
            time.sleep(0.1)
    else:
        sim.kill()
        raise SystemExit("the simulator did not start")

    with tempfile.TemporaryDirectory() as tmp:
        conf = "".join(f"[job{i}]\nurl = {url}\n" for i in range(args.jobs))
        Path(tmp, "vllm.conf").write_text(conf)
        launcher = install(Path(tmp, "plugins.d"))
        env = dict(os.environ, NETDATA_USER_CONFIG_DIR=tmp)
        plugin = subprocess.Popen([str(launcher), "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        ticks = 0  # one vllm_<job>.state block per job tick

        def read() -> None:
            nonlocal ticks
            for line in plugin.stdout:  # type: ignore[union-attr]
                if line.startswith(b"BEGIN vllm_") and line.split()[1].endswith(b".state"):
                    ticks += 1

        threading.Thread(target=read, daemon=True).start()
        try:
            time.sleep(args.warmup)
            c0, t0, n0 = cpu_seconds(plugin.pid), time.monotonic(), ticks
            time.sleep(args.seconds)
            c1, t1, n1 = cpu_seconds(plugin.pid), time.monotonic(), ticks
            mem = memory_kb(plugin.pid)
        finally:
            plugin.send_signal(signal.SIGTERM)
            code = plugin.wait(timeout=10)
            sim.terminate()
            sim.wait(timeout=10)

    cpu, wall, ticks = c1 - c0, t1 - t0, n1 - n0
    share = 100.0 * cpu / wall
    print(f"netdata plugin benchmark: {args.jobs} jobs, update_every 1, scenario {args.scenario}, "
          f"/metrics page {size / 1024:.0f} KiB, window {wall:.1f} s after {args.warmup:g} s warm-up")
    print(f"  job ticks in window      {ticks} ({ticks / wall / args.jobs:.2f} per job per second)")
    print(f"  CPU time                 {cpu * 1000:.0f} ms = {share:.2f}% of one core (target < 2%)")
    print(f"  CPU per tick per job     {cpu / max(ticks, 1) * 1000:.2f} ms")
    print(f"  RSS                      {mem['VmRSS'] / 1024:.1f} MB now, {mem['VmHWM'] / 1024:.1f} MB peak "
          "(target < 60 MB)")
    print(f"  exit code on SIGTERM     {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
