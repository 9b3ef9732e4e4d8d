"""The shipped compose file (contrib/docker/compose.yaml) run in place by Debian's docker-compose 1.29.2 with
`--scale vllm=2`: two real vLLMs (CPU build, tiny model) in the image built from the shipped Dockerfile, on the file's
one named volume `check-vllm-state`, its HEALTHCHECK, its user, its GPU reservation and its restarter service
(contrib/docker/restart-unhealthy) as written. What this machine lacks is supplied as an operator's host would
(tests/containers/compose.py): the images (no registry), the nvidia hook (no GPU), and a second compose file with
the model's and the vLLM install's paths and the tier's dockerd socket.

In order, on one stack (three vLLM boots in all: two replicas, one restart):

0. as shipped: what ran is the file's (docker inspect: healthcheck, user, read-only root, labels, the shared named
   volume, the GPU request and the nvidia hook's call, the restarter's entrypoint, environment and script).
1. both serve and turn `healthy`; the shared volume holds one private uid-1000/ with TWO state files (a loopback
   URL's state key holds the network namespace: one per replica), and no health line says the state was refused.
2. SIGSTOP of one replica's VLLM::EngineCore: it turns `unhealthy` (the proof: the check's default --stuck-seconds,
   120 s), the restarter restarts it exactly once (COOLDOWN 900, STOP_TIMEOUT 60 as shipped), it serves again;
   the other replica's every health run passes, it is never restarted (no restart event, StartedAt unchanged).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Settings
from tests.rig.heavy_lock import HeavyLock
from tests.rig.incident import wait
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
from .conftest import REPORT, TIMINGS
from .image import DOCKERFILE, build_shipped_image, build_wheel, make_base_image
from .rig import Dockerd, Knobs, Recorder, RigError, VllmContainer, metrics, parse_time, python_roots

pytestmark = pytest.mark.containers

NO_MEMORY = ("refusing the state directory", "state not saved", "judged on this run alone")
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
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
    lock = HeavyLock(say=lambda msg: print(msg, flush=True))
    t = time.monotonic()
    with lock:
        TIMINGS["compose: waiting for the heavy lock"] = time.monotonic() - t
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
    TIMINGS["compose: whole module (lock held)"] = time.monotonic() - t_all


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


def test_0_as_shipped(stack):
    """What runs is the shipped file's: docker inspect of every container against compose.yaml."""
    s, svc, rsvc = stack, stack.spec["services"]["vllm"], stack.spec["services"]["restarter"]
    assert len(s.replicas) == 2, [c.name for c in s.replicas]
    assert s.restarter, "no restarter container"
    hc = svc["healthcheck"]
    seen = {}
    for c in s.replicas:
        info = s.inspect(c.name)
        cfg, host = info["Config"], info["HostConfig"]
        seen[c.name] = {"Image": cfg["Image"], "User": cfg["User"], "Healthcheck": cfg["Healthcheck"],
                        "Labels": {k: v for k, v in cfg["Labels"].items() if not k.startswith("com.docker")},
                        "DeviceRequests": host["DeviceRequests"], "port": c.port,
                        "mounts": sorted((m["Type"], m.get("Name") or m["Source"], m["Destination"], m["RW"])
                                         for m in info["Mounts"])}
        assert cfg["Image"] == svc["image"]
        assert cfg["Cmd"] == svc["command"], cfg["Cmd"]
        assert cfg["User"] == svc["user"]
        assert cfg["Healthcheck"] == {"Test": hc["test"], "Interval": nanoseconds(hc["interval"]),
                                      "Timeout": nanoseconds(hc["timeout"]), "Retries": hc["retries"],
                                      "StartPeriod": nanoseconds(hc["start_period"])}, cfg["Healthcheck"]
        for k, v in svc["labels"].items():
            assert cfg["Labels"].get(k) == v, cfg["Labels"]
        assert host["ReadonlyRootfs"] is True and host["IpcMode"] == svc["ipc"]
        assert host["RestartPolicy"]["Name"] == svc["restart"]
        assert host["Tmpfs"] == dict((t.split(":", 1) + [""])[:2] for t in svc["tmpfs"]), host["Tmpfs"]
        # what the process sees: /tmp without noexec (torch.compile loads the kernels it builds there)
        mounts = Path(f"/proc/{info['State']['Pid']}/mounts").read_text().splitlines()
        tmp = [line.split()[3].split(",") for line in mounts if line.split()[1] == "/tmp"]
        assert tmp and "noexec" not in tmp[-1], tmp
        want = svc["deploy"]["resources"]["reservations"]["devices"][0]
        assert [(r["Driver"], r["Count"], r["Capabilities"]) for r in host["DeviceRequests"]] == \
            [(want["driver"], want["count"], [want["capabilities"]])], host["DeviceRequests"]
        vol = next(m for m in info["Mounts"] if m["Destination"] == STATE)
        assert vol["Type"] == "volume" and vol["Name"].endswith("_check-vllm-state") and vol["RW"], vol
        # the nvidia driver set the container up as on a GPU host: the hook ran for it, its environment names a GPU
        env = (Path(f"/proc/{info['State']['Pid']}/environ").read_bytes().split(b"\0"))
        assert b"NVIDIA_VISIBLE_DEVICES=0" in env, [e for e in env if e.startswith(b"NVIDIA")]
        assert info["Id"] in s.hook_log.read_text(), s.hook_log.read_text()[-1000:]
    names = {next(m["Name"] for m in s.inspect(c.name)["Mounts"] if m["Destination"] == STATE) for c in s.replicas}
    assert len(names) == 1, f"the replicas are not on one volume: {names}"
    info = s.inspect(s.restarter)
    cfg = info["Config"]
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    seen[s.restarter] = {"Image": cfg["Image"], "Entrypoint": cfg["Entrypoint"],
                         "Env": [e for e in cfg["Env"] if e.split("=")[0] in rsvc["environment"]],
                         "mounts": sorted((m["Source"], m["Destination"]) for m in info["Mounts"])}
    s.measured["inspect"] = seen
    assert cfg["Image"] == rsvc["image"] and cfg["Entrypoint"] == rsvc["entrypoint"], cfg
    for k, v in rsvc["environment"].items():
        assert f"{k}={v}" in cfg["Env"], cfg["Env"]
    assert Path(mounts["/restart-unhealthy"]["Source"]) == COMPOSE_FILE.parent / "restart-unhealthy", mounts
    assert "/var/run/docker.sock" in mounts, mounts
    assert info["State"]["Running"], info["State"]
    # the Dockerfile's own build line names the image the compose file runs
    assert f"-t {svc['image']} " in DOCKERFILE.read_text(), f"contrib/docker/Dockerfile does not build {svc['image']}"


def loaded_runs(rec: Recorder) -> list:
    return [r for r in rec.health_runs() if "starting" not in r.output]


def test_1_both_healthy_two_state_files(stack):
    s = stack
    t = time.monotonic()

    def serving() -> bool:
        for c in s.replicas:
            st = c.inspect_state()
            if st and not st.get("Running"):
                raise AssertionError(f"{c.name} exited ({st.get('ExitCode')}): {[ln for _, ln in c.logs()[-20:]]}")
        return all(metrics(c.url, timeout=3) for c in s.replicas)

    wait("both replicas to serve /metrics (models loaded)", serving, 300, 2.0, diag=s.diag)
    TIMINGS["compose: both replicas serving after up"] = time.time() - s.t0
    wait("a health run on each loaded server, each `healthy`",
         lambda: all(loaded_runs(s.recs[c.name]) and c.health() == "healthy" for c in s.replicas),
         90, 1.0, diag=s.diag)
    TIMINGS["compose: both healthy with a health run on the loaded server"] = time.monotonic() - t
    listing = state_listing(s.volume_dir())
    s.measured["state before the freeze"] = listing
    s.measured["healthy"] = {c.name: [(round(at - s.t0, 1), st) for at, st in s.recs[c.name].statuses]
                             for c in s.replicas}
    for c in s.replicas:
        runs = s.recs[c.name].health_runs()
        assert all(r.exit == 0 for r in runs), [(r.exit, r.output) for r in runs]
        said = [r.output for r in runs if any(w in r.output for w in NO_MEMORY)]
        assert not said, said
    assert listing["entries"] == ["uid-1000"], listing
    assert listing["volume"].startswith("drwxrwxrwt"), listing   # the image's 1777 directory, copied
    assert listing.get("private") == (0o700, 1000), listing
    states = [f for f in listing["files"] if f.endswith(".json")]
    assert len(states) == 2, f"not one state file per replica: {listing['files']}"


def test_2_one_frozen_restarted_once_other_untouched(stack):
    s = stack
    frozen, other = s.replicas
    rec_f, rec_o = s.recs[frozen.name], s.recs[other.name]
    cooldown = float(s.spec["services"]["restarter"]["environment"]["COOLDOWN"])
    stop_timeout = float(s.spec["services"]["restarter"]["environment"]["STOP_TIMEOUT"])
    interval = frozen.knobs.interval
    start_period = parse_duration(s.spec["services"]["vllm"]["healthcheck"]["start_period"])
    started_other = s.inspect(other.name)["State"]["StartedAt"]
    started_frozen = s.inspect(frozen.name)["State"]["StartedAt"]
    # Docker's own restarts before this window are not this test's: twice (CI, then here) one replica's first start
    # was restarted by Docker's restart policy within a second of `up --scale`, on the next port of the range
    counts = {c.name: s.inspect(c.name)["RestartCount"] for c in (frozen, other)}

    def other_fine() -> None:
        bad = [r for r in rec_o.health_runs() if r.exit != 0]
        if bad:
            raise AssertionError(f"{other.name}'s health run failed: exit {bad[0].exit}: {bad[0].output}")

    pids = [pid for pid, args in frozen.top() if "EngineCore" in args]
    assert pids, frozen.top()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
        s.stopped.append(pid)
    t_stop = rec_f.note(f"SIGSTOP to VLLM::EngineCore (host pids {pids}, from `docker top`)")
    rec_o.note(f"{frozen.name}'s engine stopped", t_stop)
    budget = Settings().stuck_seconds + 2 * interval + parse_duration(
        s.spec["services"]["vllm"]["healthcheck"]["timeout"])
    wait(f"{frozen.name} `unhealthy`", lambda: other_fine() or frozen.health() == "unhealthy"
         or rec_f.events_named("health_status: unhealthy", t_stop), budget + 20, 1.0, diag=s.diag)
    t_unhealthy = min(rec_f.events_named("health_status: unhealthy", t_stop) or [time.time()])
    TIMINGS["compose: SIGSTOP -> unhealthy"] = t_unhealthy - t_stop
    wait("the restarter to restart it", lambda: other_fine() or any(
        "restarted" in ln or "FAILED" in ln for ln in s.restarter_log()), stop_timeout + 60, 1.0, diag=s.diag)
    t_restarted = time.time()
    TIMINGS["compose: unhealthy -> restarted (docker restart -t STOP_TIMEOUT)"] = t_restarted - t_unhealthy
    rec_f.note("restart-unhealthy: " + "; ".join(s.restarter_log()))
    wait(f"{frozen.name} to serve again", lambda: other_fine() or frozen.refresh_port() and metrics(
        frozen.url, timeout=3), 300, 2.0, diag=s.diag)
    wait(f"{frozen.name} `healthy` again on the loaded server", lambda: frozen.health() == "healthy" and any(
        "starting" not in r.output for r in rec_f.health_runs(t_restarted)), 3 * interval + 30, 1.0, diag=s.diag)
    t_back = rec_f.note("serving and healthy again")
    TIMINGS["compose: restarted -> serving and healthy again"] = t_back - t_restarted
    time.sleep(interval + 1)   # one more health run of each
    t_end = time.time()
    log = s.restarter_log()
    other.refresh_port()
    f_info, o_info = s.inspect(frozen.name), s.inspect(other.name)
    failing = [r for r in rec_f.health_runs(t_stop, t_restarted) if r.exit != 0]
    o_runs = rec_o.health_runs()
    all_runs = rec_f.health_runs() + o_runs
    s.measured["frozen"] = {
        "frozen": frozen.name, "other": other.name, "engine pids": pids,
        "unhealthy after": t_unhealthy - t_stop, "budget": budget, "restarted after": t_restarted - t_stop,
        "healthy again after": t_back - t_stop, "failing run": [r.output for r in failing[:1]],
        "restarter": log, "restart events": (len(rec_f.events_named("restart", t_stop)),
                                             len(rec_o.events_named("restart"))),
        "RestartCount": (f_info["RestartCount"], o_info["RestartCount"]),
        "RestartCount before": (counts[frozen.name], counts[other.name]),
        "StartedAt": {frozen.name: (started_frozen, f_info["State"]["StartedAt"]),
                      other.name: (started_other, o_info["State"]["StartedAt"])},
        "other's runs": (sum(r.exit == 0 for r in o_runs), len(o_runs),
                         sorted({re.sub(r"[\d.]+", "N", r.output)[:80] for r in o_runs})),
        "other's statuses": [(round(at - t_stop, 1), st) for at, st in rec_o.statuses],
        "frozen's statuses": [(round(at - t_stop, 1), st) for at, st in rec_f.statuses if at >= t_stop],
        "state after": state_listing(s.volume_dir()),
        "host ports": {frozen.name: frozen.ports, other.name: other.ports},
        "cooldown": cooldown, "stop timeout": stop_timeout,
        "unhealthy after start": t_unhealthy - parse_time(started_frozen), "start period": start_period,
    }
    # the frozen one: proven, restarted once by the restarter (not by Docker's restart policy), cured
    assert failing, "unhealthy without a failing health run"
    assert t_unhealthy - t_stop <= budget, (t_unhealthy - t_stop, budget)
    # inside the shipped start_period (900 s), failures count once a run has passed: Docker ends the start period at
    # the first healthy result (moby daemon/health.go), and a loading vLLM's liveness passes
    assert t_unhealthy - parse_time(started_frozen) < start_period
    assert "healthy" in [st for at, st in rec_f.statuses if at < t_stop], rec_f.statuses
    assert [ln for ln in log if "unhealthy: restarting" in ln] and \
        all(frozen.name in ln for ln in log if "restarting" in ln), log
    assert sum("unhealthy: restarting" in ln for ln in log) == 1, log
    assert sum(ln.endswith(f"{frozen.name} restarted") for ln in log) == 1, log
    assert not [ln for ln in log if "FAILED" in ln or "refusing" in ln], log
    assert len(rec_f.events_named("restart", t_stop)) == 1, rec_f.events
    assert f_info["State"]["StartedAt"] != started_frozen
    assert parse_time(f_info["State"]["StartedAt"]) >= t_unhealthy - 1
    # the restarter's `docker restart` resets Docker's count: any crash since would show here
    assert f_info["RestartCount"] == 0, "Docker's restart policy restarted it (a crash), not the restarter"
    assert t_restarted - t_unhealthy < cooldown
    assert [st for at, st in rec_f.statuses if at > t_restarted + 1].count("unhealthy") == 0, rec_f.statuses
    # the other one: never failed, never restarted
    assert o_runs and all(r.exit == 0 for r in o_runs), [(r.exit, r.output) for r in o_runs if r.exit]
    # it kept being checked all along (Docker's interval runs from the end of the previous run)
    assert len([r for r in o_runs if r.start >= t_stop]) >= (t_end - t_stop) / (2 * interval), len(o_runs)
    assert "unhealthy" not in [st for _, st in rec_o.statuses], rec_o.statuses
    assert not rec_o.events_named("restart") and not rec_o.events_named("die"), rec_o.events
    assert o_info["State"]["StartedAt"] == started_other and o_info["RestartCount"] == counts[other.name]
    # no health run of either ever said its state was refused or not saved
    said = [r.output for r in all_runs if any(w in r.output for w in NO_MEMORY)]
    assert not said, said
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"the frozen EngineCore {pid} outlived the restart"
    # the shipped POST_MORTEM kept the proof in the container's state volume before `docker restart`
    said = [ln for ln in log if f"{frozen.name} post-mortem: " in ln]
    assert len(said) == 1 and " post-mortem in /var/lib/check_vllm/" in said[0], log
    assert log.index(said[0]) < next(i for i, ln in enumerate(log) if ln.endswith(f"{frozen.name} restarted")), log
    inside = Path(said[0].split("post-mortem in ", 1)[1].split(" (", 1)[0])
    bundle = s.volume_dir() / inside.relative_to("/var/lib/check_vllm")
    s.measured["post-mortem"] = {"said": said[0], "files": sorted(p.name for p in bundle.iterdir())}
    assert json.loads((bundle / "evidence.json").read_text())["verdict"]["word"] == "stuck"
    assert (bundle / "metrics.txt").read_text().startswith("HTTP 200")
    names = {p.name for p in bundle.iterdir()}
    assert "tree.txt" in names and any(n.startswith("proc-") for n in names), names  # the server's processes


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
