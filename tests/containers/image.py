"""The shipped image, built here: contrib/docker/Dockerfile itself (read in place with `docker build -f`), on a base
image the tier makes, since no registry is reachable.

The Dockerfile's base is its build argument VLLM_IMAGE (vllm/vllm-openai in the field). What its RUN steps need of
the base is python3 with pip and httpx (vLLM's image has them), a /bin/sh with `rm` and `install`, and somewhere pip
finds nagiosplugin (in the field: PyPI). The tier's base image (`docker import` of a root file system made here):

- busybox-static as /bin/busybox, every applet linked in /bin (sh, rm, ...), and coreutils' /usr/bin/install
  (Debian's busybox-static has no `install` applet) and util-linux's /usr/bin/lscpu (vLLM's CPU engine runs it):
  a vLLM image has both;
- Debian 12's python3.11 (/usr/bin/python3.11, its standard library /usr/lib/python3.11 without Debian's
  EXTERNALLY-MANAGED marker, which a vLLM image's Python does not have either) and the shared libraries it and its
  extension modules link, at their own paths;
- pip, httpx and httpx's dependencies installed (`pip install --target`) into /usr/local/lib/python3.11/dist-packages,
  from the wheels this machine's pip configuration finds (local directories; no network);
- the nagiosplugin wheel in /opt/wheels, with PIP_FIND_LINKS=/opt/wheels PIP_NO_INDEX=1 in its environment: the
  Dockerfile's `pip install ... nagiosplugin` installs it from there, as it would from PyPI;
- /etc/passwd and /etc/group naming root, nobody and uid/gid 1000 (the compose file's user).

vLLM itself is not in the image: as in the rest of the tier, the vLLM venv (and the Python install it was made from,
and the host's /usr/lib/x86_64-linux-gnu that torch links) is bind-mounted read-only at run time, with the model.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from .rig import BUSYBOX, Dockerd, RigError

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "contrib" / "docker" / "Dockerfile"
BASE_IMAGE = "check-vllm-tier-base:py3"
SHIPPED_IMAGE = "vllm-openai-check-vllm:tier"
PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
TOOLS = (Path("/usr/bin/install"), Path("/usr/bin/lscpu"))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _run(argv: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    if r.returncode != 0:
        raise RigError(f"{' '.join(argv[:6])} ... failed (exit {r.returncode}): {(r.stderr or r.stdout)[-2000:]}")
    return r


def _libraries(files: list[Path]) -> set[str]:
    """Every shared library `ldd` names for these files (and the loader)."""
    out: set[str] = set()
    for f in files:
        r = subprocess.run(["ldd", str(f)], capture_output=True, text=True, timeout=60)
        for line in r.stdout.splitlines():
            m = re.search(r"(/\S+)", line.split("=>")[-1])
            if m and os.path.exists(m.group(1)):
                out.add(m.group(1))
    return out


def _put(rootfs: Path, path: str) -> None:
    """The file at `path` into rootfs at its real path, and at its named path as a link to it when they differ."""
    real = os.path.realpath(path)
    dst = rootfs / real.lstrip("/")
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, dst)
    named = Path(os.path.realpath(os.path.dirname(path))) / os.path.basename(path)
    link = rootfs / str(named).lstrip("/")
    if str(named) != real and not link.exists() and not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(real)


def make_base_image(d: Dockerd, work: Path) -> str:
    """The base image (see the module's doc); its tag."""
    for need in (BUSYBOX, str(PYTHON), *map(str, TOOLS)):
        if not os.access(need, os.X_OK):
            raise RigError(f"{need} is not installed: run .ci/containers-deps.sh")
    rootfs = work / "base-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    for sub in ("bin", "usr/bin", "usr/local/bin", "usr/lib", "root", "tmp", "etc", "proc", "sys", "dev",
                "var/lib", "opt/wheels"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    for merged in ("lib", "lib64", "sbin"):                 # Debian 12's merged /usr
        (rootfs / "usr" / merged).mkdir(parents=True, exist_ok=True)
        (rootfs / merged).symlink_to(f"usr/{merged}")
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    applets = _run([BUSYBOX, "--list"]).stdout.split()
    for applet in applets:
        if applet != "busybox" and not (rootfs / "bin" / applet).exists():
            (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "tmp").chmod(0o1777)
    # python3.11 and its standard library
    shutil.copy2(PYTHON, rootfs / "usr" / "bin" / "python3.11")
    (rootfs / "usr" / "bin" / "python3").symlink_to("python3.11")
    shutil.copytree(STDLIB, rootfs / STDLIB.relative_to("/"), symlinks=True,
                    ignore=shutil.ignore_patterns("EXTERNALLY-MANAGED", "test", "idlelib", "tkinter", "turtledemo",
                                                  "__pycache__"))
    # coreutils' install (busybox-static 1.35 has no `install` applet; the Dockerfile's RUN uses `install -d -m`) and
    # util-linux's lscpu (vLLM's CPU engine runs `lscpu --json`; a vLLM image has both)
    for tool in TOOLS:
        shutil.copy2(tool, rootfs / tool.relative_to("/"))
    dynload = sorted((STDLIB / "lib-dynload").glob("*.so"))
    for lib in _libraries([PYTHON, *TOOLS, *dynload]):
        _put(rootfs, lib)
    # pip and httpx, from the wheels this machine's pip finds (no network)
    site = rootfs / "usr/local/lib/python3.11/dist-packages"
    site.mkdir(parents=True, exist_ok=True)
    wheels = work / "base-wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheels), "nagiosplugin"])
    _run([sys.executable, "-m", "pip", "install", "--no-compile", "--target", str(site), "pip", "httpx"])
    for whl in wheels.glob("nagiosplugin-*.whl"):
        shutil.copy2(whl, rootfs / "opt" / "wheels" / whl.name)
    if not list((rootfs / "opt" / "wheels").glob("nagiosplugin-*.whl")):
        raise RigError(f"pip download nagiosplugin left no wheel in {wheels}")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nvllm:x:1000:1000::/tmp:/bin/sh\n"
                                           "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\nvllm:x:1000:\nnogroup:x:65534:\n")
    tar = work / "base-rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(rootfs, arcname=".")
    d.run("import", "-c", f"ENV PATH={PATH}", "-c", "ENV PIP_FIND_LINKS=/opt/wheels", "-c", "ENV PIP_NO_INDEX=1",
          "-c", 'CMD ["/bin/sh"]', str(tar), BASE_IMAGE, timeout=300)
    # what the Dockerfile's RUN needs of its base, checked before it runs
    r = d.run("run", "--rm", "--network", "none", BASE_IMAGE, "python3", "-c",
              "import httpx, pip, ssl; print(httpx.__version__, pip.__version__)", check=False, timeout=120)
    if r.returncode != 0:
        raise RigError(f"the base image's python3 cannot import httpx and pip: {(r.stderr or r.stdout)[-1500:]}")
    shutil.rmtree(rootfs, ignore_errors=True)
    return BASE_IMAGE


def build_wheel(context: Path) -> Path:
    """The Dockerfile's build context: dist/check_vllm-*-py3-none-any.whl, built from this checkout."""
    dist = context / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(REPO)],
         timeout=600)
    wheels = list(dist.glob("check_vllm-*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise RigError(f"pip wheel made {[p.name for p in dist.iterdir()]}, not one check_vllm-*-py3-none-any.whl")
    return wheels[0]


def build_shipped_image(d: Dockerd, context: Path, base: str, tag: str = SHIPPED_IMAGE) -> tuple[str | None, str]:
    """`docker build -f contrib/docker/Dockerfile --build-arg VLLM_IMAGE=BASE -t TAG CONTEXT`: the tag (None when
    the build failed) and the build's output. The RUN steps get no network (`--network none`)."""
    r = d.run("build", "--network", "none", "-f", str(DOCKERFILE), "--build-arg", f"VLLM_IMAGE={base}",
              "-t", tag, str(context), timeout=600, check=False)
    log = r.stdout + r.stderr + (f"\n(docker build exit {r.returncode})" if r.returncode else "")
    return (tag if r.returncode == 0 else None), log
