"""contrib/docker/restart-unhealthy run as shipped by /bin/sh, with a stand-in docker client that replays health
events: one restart per unhealthy spell, and none within COOLDOWN of the last (the real dockerd run is the
containers tier's)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "contrib" / "docker" / "restart-unhealthy"

FAKE = """#!/bin/sh
case "$1" in
  events) printf 'c1 vllm health_status: unhealthy\\nc1 vllm health_status: healthy\\nc1 vllm health_status: unhealthy\\n'
          echo "$@" > "$LOG.events" ;;
  restart) echo "$@" >> "$LOG" ;;
esac
"""


def run(tmp_path: Path, cooldown: str) -> tuple[list[str], str]:
    fake, log = tmp_path / "docker", tmp_path / f"restarts-{cooldown}"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    done = subprocess.run(["/bin/sh", str(SCRIPT), "--filter", "label=check_vllm.restart=unhealthy"],
                          env={**os.environ, "DOCKER": str(fake), "LOG": str(log), "COOLDOWN": cooldown},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "docker events ended" in done.stderr, done
    asked = Path(f"{log}.events").read_text()
    assert "--filter event=health_status --filter label=check_vllm.restart=unhealthy" in asked, asked
    return (log.read_text().splitlines() if log.exists() else []), done.stdout


def test_one_restart_per_unhealthy_spell_and_none_within_the_cooldown(tmp_path):
    restarts, _ = run(tmp_path, "0")
    assert restarts == ["restart -t 10 c1", "restart -t 10 c1"]
    held, out = run(tmp_path, "900")
    assert held == ["restart -t 10 c1"], out
    assert "within the cooldown: left alone" in out
