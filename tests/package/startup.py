"""Start-up of one check run on Debian's libraries (the .deb on /usr/bin/python3) vs the pip install.

    python tests/package/startup.py [REPS]     # figures, not pass/fail; needs the .deb installed

Each install is held against the import floor bench/run.py uses (`import httpx, nagiosplugin,
prometheus_client.parser`, and without prometheus_client), on its own interpreter: a steady busy run
against the simulator, runs interleaved, medians.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import run as bench  # noqa: E402  - bench/run.py: the floor, the same strings

from tests.package import layout  # noqa: E402
from vllm_simulator import Simulator  # noqa: E402


def wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=bench.ENV, cwd="/")
    return time.perf_counter() - started


def main(reps: int) -> None:
    pip_check = [sys.executable, str(Path(sysconfig.get_path("scripts")) / "check_vllm")]
    deb_check = [layout.SYSTEM_PYTHON, str(layout.CHECK)]
    installs = {"pip": (sys.executable, pip_check), "deb": (layout.SYSTEM_PYTHON, deb_check)}
    with Simulator(scenario="busy") as sim, tempfile.TemporaryDirectory() as tmp:
        cmds: dict[str, list[str]] = {}
        for name, (python, check) in installs.items():
            cmds[f"{name} floor"] = [python, *bench.FLOOR[1:]]
            cmds[f"{name} base"] = [python, *bench.BASE[1:]]
            cmds[f"{name} run"] = [*check, "-u", sim.url, "--state-dir", f"{tmp}/{name}", "--min-gap", "0"]
        for _ in range(3):  # the baseline reading, the page cache, the bytecode
            for cmd in cmds.values():
                wall(cmd)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(reps):
            for k, cmd in cmds.items():
                times[k].append(wall(cmd))
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in installs:
        run, floor, base = med[f"{name} run"], med[f"{name} floor"], med[f"{name} base"]
        print(f"{name}: run {run * 1000:.1f} ms, floor {floor * 1000:.1f} ms, floor without prometheus_client "
              f"{base * 1000:.1f} ms: run/floor {run / floor:.2f} x, run/base {run / base:.2f} x")
    print(f"deb run / pip run {med['deb run'] / med['pip run']:.2f} x; "
          f"deb floor / pip floor {med['deb floor'] / med['pip floor']:.2f} x ({reps} runs each, interleaved)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
