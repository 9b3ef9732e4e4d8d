"""The shipped compose stack (contrib/docker/compose.yaml, `--scale vllm=2`) as the containers tier starts it: its
replicas, each watched by a Recorder, the restarter, and what the report says of it. The tests are test_compose.py
and test_frozen.py; the session fixture is conftest.py's `stack`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.tiers import version_of
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv

from .compose import (
    COMPOSE_FILE,
    DOCKER_COMPOSE,
    Compose,
    make_cli_image,
    make_vllm_base,
    ports_in_use,
    read_compose,
    write_hook,
    write_override,
)
from .image import DOCKERFILE, build_shipped_image, build_wheel, make_base_image
from .report import REPORT, TIMINGS
from .rig import Dockerd, Knobs, Recorder, RigError, VllmContainer, python_roots

LIBS = Path("/usr/lib/x86_64-linux-gnu")   # what torch and the venv's Python link: the host's, bind-mounted
STATE = "/var/lib/check_vllm"


class Replica(VllmContainer):
    """One container of the vllm service, for rig.py's Recorder and helpers (inspect, top, logs)."""

    def __init__(self, d: Dockerd, name: str, host_port: int, interval: float) -> None:
        self.d, self.name, self.port = d, name, host_port
        self.url = f"http://127.0.0.1:{host_port}"   # the published port, from the host
        self.knobs = Knobs(interval=interval)
        self.ports = [host_port]

    def refresh_port(self) -> int:
        """The host port published now: a restarted replica takes the first free port of the range again, which
        need not be the one it had (8000-8003:8000)."""
        st = json.loads(self.d.run("inspect", "--format", "{{json .NetworkSettings.Ports}}", self.name,
                                   timeout=30).stdout)
        bound = (st or {}).get("8000/tcp") or []
        if bound:
            self.port = int(bound[0]["HostPort"])
            self.url = f"http://127.0.0.1:{self.port}"
            if self.ports[-1] != self.port:
                self.ports.append(self.port)
        return self.port


class Stack:
    def __init__(self, d: Dockerd, compose: Compose, spec: dict, work: Path, hook_log: Path) -> None:
        self.d, self.compose, self.spec, self.work, self.hook_log = d, compose, spec, work, hook_log
        self.replicas: list[Replica] = []
        self.recs: dict[str, Recorder] = {}
        self.restarter = ""
        self.t0 = time.time()
        self.measured: dict[str, object] = {}
        self.stopped: list[int] = []

    def restarter_log(self) -> list[str]:
        r = self.d.run("logs", self.restarter, check=False, timeout=60)
        return (r.stdout + r.stderr).splitlines()

    def inspect(self, name: str) -> dict:
        found = self.compose.inspect(name)
        return found[0] if found else {}

    def volume_dir(self) -> Path:
        info = self.inspect(self.replicas[0].name)
        mount = next(m for m in info["Mounts"] if m["Destination"] == STATE)
        return Path(mount["Source"])

    def diag(self) -> str:
        out = []
        for c in self.replicas:
            runs = self.recs[c.name].health_runs()[-3:] if c.name in self.recs else []
            out.append(f"{c.name}: {c.health()}; last runs {[(r.exit, r.output) for r in runs]}; log tail: "
                       + " | ".join(line for _, line in c.logs()[-4:]))
        out.append(f"restarter: {self.restarter_log()[-5:]}")
        return "\n".join(out)


def parse_duration(text: str) -> float:
    """A compose duration (10s, 1m30s, 900s, 15m) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", str(text))
    if not parts:
        raise ValueError(f"not a compose duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def nanoseconds(text: str) -> int:
    return int(parse_duration(text) * 1e9)


def state_listing(vol: Path) -> dict:
    entries = sorted(p.name for p in vol.iterdir())
    out: dict[str, object] = {"entries": entries}
    st = os.lstat(vol)
    out["volume"] = f"{stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid}"
    private = vol / "uid-1000"
    if private.is_dir():
        pst = os.lstat(private)
        out["private"] = (stat.S_IMODE(pst.st_mode), pst.st_uid)
        out["files"] = sorted(p.name for p in private.iterdir())
    return out


def started_stack(tmp_path_factory) -> Iterator[Stack]:
    """The shipped compose stack up with two replicas (the caller holds the heavy lock), torn down at the end."""
    t_all = time.monotonic()
    spec = read_compose()
    svc = spec["services"]["vllm"]
    busy = ports_in_use(range(8000, 8004))
    if busy:
        pytest.fail(f"the compose file publishes host ports 8000-8003 ({svc['ports']}), and something on this machine "
                    f"already listens on {busy}: free them (the test does not edit the shipped ports)", pytrace=False)
    if not os.access(DOCKER_COMPOSE, os.X_OK):
        pytest.fail(f"{DOCKER_COMPOSE} is not installed: run .ci/containers-deps.sh", pytrace=False)
    try:
        venv = ensure_venv()
        model = ensure_tiny_model(venv)
    except VllmSetupError as exc:
        pytest.fail(f"compose: cannot prepare: {exc}", pytrace=False)
    base_dir = Path(os.environ.get("CONTAINERS_REPORT_DIR") or tmp_path_factory.mktemp("compose"))
    work = base_dir / "compose"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    short = Path(tempfile.mkdtemp(prefix="cvd-", dir="/tmp"))
    hook_log = work / "nvidia-hook.log"
    hook_log.touch()
    d = Dockerd(short, path_first=(write_hook(short / "bin", hook_log).parent,))
    t = time.monotonic()
    s: Stack | None = None
    compose: Compose | None = None
    try:
        try:
            d.start()
        except (RigError, OSError) as exc:
            pytest.fail(f"compose: dockerd did not start: {exc}", pytrace=False)
        t = time.monotonic()
        try:
            base = make_base_image(d, work)
            build_wheel(work / "context")
            vllm_base = make_vllm_base(d, base, venv, work)
            image, log = build_shipped_image(d, work / "context", vllm_base, svc["image"])
            (work / "docker-build.log").write_text(log)
            if image is None:
                pytest.fail(f"docker build -f {DOCKERFILE} failed:\n{log[-3000:]}", pytrace=False)
            make_cli_image(d, work, spec["services"]["restarter"]["image"])
        except (RigError, OSError) as exc:
            pytest.fail(f"compose: the images: {exc}", pytrace=False)
        TIMINGS["compose: images (base, wheel, vLLM stand-in, docker build of the Dockerfile, docker CLI)"] = \
            time.monotonic() - t
        models = work / "models"
        shutil.copytree(model, models / "my-model")
        for p in (models, models / "my-model"):
            p.chmod(0o755)
        for f in (models / "my-model").iterdir():
            f.chmod(0o644)
        ro = sorted({Path(os.path.realpath(x)) for x in (*python_roots(venv), LIBS)})
        override = work / "override.yaml"
        write_override(override, models, ro, d.sock)
        compose = Compose(d, override, work / "compose.log")
        s = Stack(d, compose, spec, work, hook_log)
        s.measured["versions"] = {"docker-compose": version_of([DOCKER_COMPOSE, "version", "--short"]),
                                  "dockerd": version_of(["/usr/sbin/dockerd", "--version"])}
        s.measured["override"] = override.read_text()
        t = time.monotonic()
        s.t0 = time.time()
        try:
            r = compose.run("up", "-d", "--scale", "vllm=2", timeout=300)
        except RigError as exc:
            pytest.fail(f"compose: docker-compose up failed: {exc}", pytrace=False)
        TIMINGS["compose: docker-compose up -d --scale vllm=2"] = time.monotonic() - t
        s.measured["up"] = (r.stdout + r.stderr).strip()
        interval = parse_duration(svc["healthcheck"]["interval"])
        for info in compose.inspect(*compose.ids("vllm")):
            port = int(info["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"])
            c = Replica(d, info["Name"].lstrip("/"), port, interval)
            s.replicas.append(c)
            rec = Recorder(c, s.t0)
            rec.start()
            s.recs[c.name] = rec
        s.replicas.sort(key=lambda c: c.name)
        s.restarter = next(iter(compose.inspect(*compose.ids("restarter"))), {}).get("Name", "").lstrip("/")
        yield s
    finally:
        t = time.monotonic()
        notes = []
        if s is not None:
            for pid in s.stopped:   # a frozen engine the restart did not end: let it go before the stack goes
                try:
                    os.kill(pid, signal.SIGCONT)
                    notes.append(f"SIGCONT {pid}")
                except ProcessLookupError:
                    pass
            for rec in s.recs.values():
                rec.stop()
            try:
                (work / "restart-unhealthy.log").write_text("\n".join(s.restarter_log()) + "\n")
                for c in s.replicas:
                    (work / f"{c.name}.log").write_text("\n".join(f"{at:.3f} {ln}" for at, ln in c.logs()) + "\n")
            except Exception as exc:  # noqa: BLE001 - best effort, the tear-down goes on
                notes.append(f"logs: {exc}")
        if compose is not None:
            r = compose.run("down", "-v", "--timeout", "30", timeout=180, check=False)
            notes.append(f"docker-compose down -v: exit {r.returncode}")
        notes += d.stop()
        shutil.copyfile(d.log, work / "dockerd.log") if d.log.exists() else None
        shutil.rmtree(short, ignore_errors=True)
        TIMINGS["compose: tear-down (down -v, dockerd)"] = time.monotonic() - t
        if s is not None:
            s.measured["tear-down"] = notes
            REPORT["compose: measured"] = summary(s)
            for c in s.replicas:
                if c.name in s.recs:
                    REPORT[f"compose: timeline of {c.name}"] = s.recs[c.name].timeline()
            (base_dir / "compose-timeline.txt").write_text(
                "\n\n".join(v for k, v in REPORT.items() if k.startswith("compose:")) + "\n")
    TIMINGS["compose: whole stack"] = time.monotonic() - t_all


def summary(s: Stack) -> str:
    m = s.measured
    out = [f"docker-compose -f {COMPOSE_FILE.relative_to(COMPOSE_FILE.parents[2])} -f override.yaml up -d "
           f"--scale vllm=2; versions {m.get('versions')}",
           "override.yaml (this machine's differences):", *("  " + ln for ln in str(m.get("override", "")).splitlines())]
    for name, seen in (m.get("inspect") or {}).items():
        out.append(f"{name}: {seen}")
    if m.get("state before the freeze"):
        out.append(f"shared volume before the freeze: {m['state before the freeze']}")
    for name, statuses in (m.get("healthy") or {}).items():
        out.append(f"{name} statuses: {statuses}")
    f = m.get("frozen") or {}
    if f:
        passed, ran, said = f["other's runs"]
        o_statuses, f_statuses = f["other's statuses"], f["frozen's statuses"]
        out += [f"frozen {f['frozen']} (EngineCore {f['engine pids']}): unhealthy {f['unhealthy after']:.1f}s after "
                f"SIGSTOP (budget --stuck-seconds + 2 intervals + timeout = {f['budget']:g}s); restarted at "
                f"{f['restarted after']:.1f}s (STOP_TIMEOUT {f['stop timeout']:g}); serving and healthy again at "
                f"{f['healthy again after']:.1f}s; restart events (frozen, other) {f['restart events']}; RestartCount "
                f"{f['RestartCount']} (before the freeze: {f['RestartCount before']})",
                f"  failing run: {f['failing run']}",
                f"  unhealthy {f['unhealthy after start']:.0f}s after the container started, inside its start_period "
                f"of {f['start period']:g}s: a passing run had ended it",
                *(f"  restarter: {ln}" for ln in f["restarter"]),
                f"  StartedAt (before, after): {f['StartedAt']}; host ports (in turn): {f['host ports']}",
                f"  {f['other']}: {passed}/{ran} health runs passed: {said}; statuses {o_statuses}",
                f"  {f['frozen']} statuses after SIGSTOP: {f_statuses}",
                f"  shared volume after: {f['state after']}"]
    if m.get("tear-down"):
        out.append(f"tear-down: {m['tear-down']}")
    return "\n".join(out)
