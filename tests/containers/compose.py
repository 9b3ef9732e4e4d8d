"""The compose rig: contrib/docker/compose.yaml run in place by Debian's docker-compose 1.29.2 against the tier's own
dockerd, with only what this machine lacks supplied, the way an operator's host would supply it:

- the service's image `vllm-openai-check-vllm:v0.32.0`: contrib/docker/Dockerfile built (tests/containers/image.py)
  on a stand-in for vllm/vllm-openai:v0.32.0 (no registry): the tier's base image plus what the vLLM image has and
  the base lacks, its ENTRYPOINT (vLLM's server taking the compose file's `command:` as its arguments) and its
  environment. vLLM itself (the CPU build's venv, the Python it was made from, the host's libraries torch links)
  is bind-mounted read-only by the override below, as everywhere in the tier;
- the restarter's image `docker:27-cli`: FROM scratch, the host's docker client (/usr/bin/docker and the shared
  libraries it links) as /usr/local/bin/docker, as the docker CLI image has it, and busybox-static with its applets
  as /bin (the docker CLI image is Alpine: busybox's sh and tools);
- the GPU reservation (`deploy.resources.reservations.devices: driver nvidia`): moby registers its `nvidia` device
  driver when, as dockerd starts, `nvidia-container-runtime-hook` is on its PATH (daemon/nvidia_linux.go: init()
  looks it up; setNvidiaGPUs sets NVIDIA_VISIBLE_DEVICES in the container's environment and adds the hook as an
  OCI prestart hook, run by runc as `nvidia-container-runtime-hook prestart` with the container's state on stdin).
  The rig's hook is a script that reads its stdin, logs its call and exits 0: what a GPU-less host with the
  toolkit would see, no GPU in the container. dockerd is started with its directory first on PATH;
- a second compose file (`-f override.yaml`, written by the test): compose merges `volumes` by container path, so
  it maps the tiny model onto /models (the shipped /srv/models), adds the vLLM install's read-only mounts, and maps
  the tier's dockerd socket onto the restarter's /var/run/docker.sock (the tier's dockerd is not the host's: an
  operator with another socket, rootless Docker's, writes the same line). Nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import yaml

from tests.rig.vllm_server import SERVER_ENV

from .image import PATH, _libraries, _put
from .rig import BUSYBOX, DOCKER, Dockerd, RigError

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "contrib" / "docker" / "compose.yaml"
DOCKER_COMPOSE = "/usr/bin/docker-compose"
HOOK = "nvidia-container-runtime-hook"
VLLM_BASE = "check-vllm-tier-base:vllm-openai"
#: what every vLLM of the tier runs with on 2 cores (tests/rig/vllm_server.py): no compile, the model's own dtype
CPU_ARGS = ("--enforce-eager", "--dtype", "float32")


def read_compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def write_hook(bindir: Path, log: Path) -> Path:
    """The stand-in nvidia-container-runtime-hook: reads the state runc gives it, logs the call, exits 0."""
    bindir.mkdir(parents=True, exist_ok=True)
    hook = bindir / HOOK
    hook.write_text("#!/bin/sh\n# the tier's stand-in for the NVIDIA toolkit's hook on a GPU-less host (tests/containers/"
                    "compose.py)\n"
                    f'state=$(/bin/cat)\necho "$(/bin/date +%s) $* $state" >> {log}\nexit 0\n')
    hook.chmod(0o755)
    return hook


def make_vllm_base(d: Dockerd, base: str, venv: Path, work: Path) -> str:
    """The stand-in for vllm/vllm-openai:v0.32.0: the tier's base image with vLLM's entrypoint and environment."""
    ctx = work / "vllm-base"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    # the tier's rule for a real vLLM on 2 cores (rig.py): its own autogroup at nice 19, from inside the container
    server = f'echo 19 > /proc/self/autogroup && exec {venv}/bin/python -m vllm.entrypoints.openai.api_server ' \
             f'"$@" {" ".join(CPU_ARGS)}'
    entrypoint = ["/bin/sh", "-c", server, "vllm"]
    env = {**SERVER_ENV, "VIRTUAL_ENV": str(venv), "PATH": f"{venv}/bin:{PATH}"}
    (ctx / "Dockerfile").write_text(
        f"FROM {base}\n"
        + "".join(f"ENV {k}={json.dumps(v)}\n" for k, v in env.items())
        + f"ENTRYPOINT {json.dumps(entrypoint)}\nCMD []\n")
    r = d.run("build", "--network", "none", "-t", VLLM_BASE, str(ctx), timeout=300, check=False)
    if r.returncode != 0:
        raise RigError(f"the vLLM stand-in image did not build: {(r.stdout + r.stderr)[-2000:]}")
    return VLLM_BASE


def make_cli_image(d: Dockerd, work: Path, tag: str) -> str:
    """`docker:27-cli` as far as the restarter needs it (see the module's doc)."""
    for need in (BUSYBOX, DOCKER):
        if not os.access(need, os.X_OK):
            raise RigError(f"{need} is not installed: run .ci/containers-deps.sh")
    rootfs = work / "cli-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    for sub in ("bin", "usr/local/bin", "usr/bin", "tmp", "etc", "proc", "sys", "dev", "var/run"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    for merged in ("lib", "lib64"):   # the loader's and libc's paths as the host names them (merged /usr)
        (rootfs / "usr" / merged).mkdir(parents=True, exist_ok=True)
        (rootfs / merged).symlink_to(f"usr/{merged}")
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, timeout=30).stdout.split()
    for applet in applets:
        if applet != "busybox" and not (rootfs / "bin" / applet).exists():
            (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "tmp").chmod(0o1777)
    shutil.copy2(DOCKER, rootfs / "usr" / "local" / "bin" / "docker")
    for lib in _libraries([Path(DOCKER)]):
        _put(rootfs, lib)
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
    tar = work / "cli-rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(rootfs, arcname=".")
    d.run("import", "-c", f"ENV PATH={PATH}", "-c", 'CMD ["sh"]', str(tar), tag, timeout=300)
    shutil.rmtree(rootfs, ignore_errors=True)
    tar.unlink()
    # what the restarter runs of it, checked before it runs: the client by name from PATH, and busybox's tools
    r = d.run("run", "--rm", "--network", "none", tag, "sh", "-c", "docker --version && mkfifo --help 2>&1 | head -1",
              check=False, timeout=120)
    if r.returncode != 0 or "Docker version" not in r.stdout:
        raise RigError(f"the docker CLI image's `docker --version` failed (exit {r.returncode}): "
                       f"{(r.stdout + r.stderr)[-1500:]}")
    return tag


def write_override(path: Path, models: Path, ro: list[Path], sock: Path) -> dict:
    """The operator's second compose file (see the module's doc); what it says."""
    override = {
        "services": {
            "vllm": {"volumes": [f"{models}:/models:ro", *(f"{p}:{p}:ro" for p in ro)]},
            "restarter": {"volumes": [f"{sock}:/var/run/docker.sock"]},
        },
    }
    path.write_text("# this machine's differences only (tests/containers/compose.py): where the model is, the vLLM\n"
                    "# install the stand-in image runs, and the socket of the tier's dockerd\n"
                    + yaml.safe_dump(override, sort_keys=False))
    return override


def ports_in_use(ports: range) -> list[int]:
    """Host ports of the range something already listens on (0.0.0.0 or any address)."""
    busy = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                busy.append(port)
    return busy


class Compose:
    """`docker-compose -f contrib/docker/compose.yaml -f OVERRIDE ...` against the tier's dockerd."""

    def __init__(self, d: Dockerd, override: Path, log: Path) -> None:
        self.d, self.override, self.log = d, override, log
        self.env = {**os.environ, "DOCKER_HOST": d.host, "COMPOSE_HTTP_TIMEOUT": "300"}
        for k in ("COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
            self.env.pop(k, None)

    def argv(self, *args: str) -> list[str]:
        return [DOCKER_COMPOSE, "-f", str(COMPOSE_FILE), "-f", str(self.override), *args]

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        t = time.monotonic()
        r = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout, env=self.env,
                           stdin=subprocess.DEVNULL, cwd=str(REPO))
        with open(self.log, "a") as f:
            f.write(f"$ docker-compose {' '.join(args)}   (exit {r.returncode}, {time.monotonic() - t:.1f}s)\n"
                    f"{r.stdout}{r.stderr}\n")
        if check and r.returncode != 0:
            raise RigError(f"docker-compose {' '.join(args)} failed (exit {r.returncode}):\n"
                           f"{(r.stderr + r.stdout)[-3000:]}")
        return r

    def ids(self, service: str) -> list[str]:
        return self.run("ps", "-q", service, timeout=60).stdout.split()

    def inspect(self, *ids: str) -> list[dict]:
        if not ids:
            return []
        r = self.d.run("inspect", *ids, check=False, timeout=60)
        return json.loads(r.stdout) if r.stdout.strip() else []
