"""What the promtool tests share: promtool itself (Debian's prometheus package, installed once by
.ci/prometheus-deps.sh; without it the tests FAIL with the installer's output, never skip) and one way to run it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPS = REPO / ".ci" / "prometheus-deps.sh"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        out = subprocess.run(["bash", str(DEPS)], capture_output=True, text=True, timeout=900)
        found = shutil.which("promtool")
        if out.returncode != 0 or not found:
            pytest.fail(f"{DEPS} failed (exit {out.returncode}), promtool is needed:\n{out.stderr[-3000:]}",
                        pytrace=False)
    return found


def run(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=120)
