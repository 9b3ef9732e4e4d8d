"""Find chance-red tests before CI does: run the fast tiers (or real tiers through tox) N times in a row, and say
each run's pass and fail counts, its time and which tests failed.

    python tools/flakes.py                       # the fast suite 5 times: what `tox -e py3` runs, in this venv
    python tools/flakes.py --runs 2 --tox real-vllm real-llamacpp   # each real tier twice, through tox

Every run goes to the end (a flake found in run 2 does not hide one in run 4); the exit is 1 when any run failed.
A failure here is a defect to fix at its cause, never a run to repeat until green.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
#: The fast tiers exactly as tox.ini's py3 env runs them: the parallel suite, then the host tier alone.
FAST = (
    ("suite", [sys.executable, "-m", "pytest", "-q", "-n", "8", "-p", "no:cacheprovider", "-rfE"]),
    ("host", [sys.executable, "-m", "pytest", "-q", "-m", "host", "-p", "no:cacheprovider", "-rfE", "tests/host"]),
)
COUNT = re.compile(r"(\d+) (passed|failed|error|errors|skipped|deselected)")
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


class Run(NamedTuple):
    name: str
    number: int
    code: int
    seconds: float
    counts: dict[str, int]
    failed: list[str]

    def line(self) -> str:
        counts = ", ".join(f"{n} {k}" for k, n in self.counts.items()) or "no summary"
        said = "green" if self.code == 0 else f"RED (exit {self.code}): {' '.join(self.failed) or 'see its output'}"
        return f"{self.name} run {self.number}: {said}; {counts}; {self.seconds:.0f} s"


def run(name: str, number: int, argv: Sequence[str]) -> Run:
    """One run, its output kept beside the summary (the last lines are what tells a flake's cause)."""
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    log = ROOT / ".tox" / "flakes" / f"{name}-{number}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(out)
    tail = out.strip().splitlines()[-1] if out.strip() else ""
    counts = {kind: int(n) for n, kind in COUNT.findall(tail)}
    return Run(name, number, proc.returncode, took, counts, FAILED.findall(out))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--tox", nargs="+", metavar="ENV", help="tox envs to run instead of the fast tiers")
    args = parser.parse_args(argv)
    plan = ([(env, [sys.executable, "-m", "tox", "-e", env]) for env in args.tox] if args.tox else list(FAST))
    runs = []
    for number in range(1, args.runs + 1):
        for name, cmd in plan:
            runs.append(run(name, number, cmd))
            print(runs[-1].line(), flush=True)
    red = [r for r in runs if r.code != 0]
    print(f"{len(runs) - len(red)} of {len(runs)} runs green; logs in {ROOT / '.tox' / 'flakes'}")
    return 1 if red else 0


if __name__ == "__main__":
    sys.exit(main())
