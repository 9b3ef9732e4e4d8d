"""A real server's start held at its own steps, by event (tests/rig/held_start.c, an LD_PRELOAD shim compiled here
with the C compiler that built llama-server): the test removes a file to let each step go, and waits for the
shim's `.reached` file to know it is there. No signal and no ptrace: nothing races the tiny model's load."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from tests.rig.waiting import wait_for

SOURCE = Path(__file__).with_name("held_start.c")
CACHE = Path.home() / ".cache" / "check_vllm" / "held_start"
STEPS = ("start", "load")


def shim() -> Path:
    """The compiled shim, cached by its source's hash."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    built = CACHE / f"held_start-{digest}.so"
    if not built.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = built.with_suffix(".tmp")
        out = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(tmp), str(SOURCE), "-ldl"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"compiling {SOURCE.name} failed:\n{out.stderr}"
        tmp.replace(built)
    return built


class HeldStart:
    """The environment that holds a server at each step, and the files that let it go."""

    def __init__(self, where: Path, model: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.files = {step: where / f"held-{step}" for step in STEPS}
        for file in self.files.values():
            file.touch()
            file.with_name(f"{file.name}.reached").unlink(missing_ok=True)
        self.env = {"LD_PRELOAD": str(shim()), "HELD_START": str(self.files["start"]),
                    "HELD_LOAD": str(self.files["load"]), "HELD_MODEL": str(model)}

    def reached(self, step: str, timeout: float = 60.0, diag=lambda: "") -> None:
        file = self.files[step]
        wait_for(f"the server held at its {step}", file.with_name(f"{file.name}.reached").exists, timeout, 0.01, diag)

    def release(self, step: str) -> None:
        self.files[step].unlink(missing_ok=True)

    def release_all(self) -> None:
        for step in STEPS:
            self.release(step)
