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
2. (test_frozen.py, at once with the pod's) SIGSTOP of one replica's VLLM::EngineCore: it turns `unhealthy`, the
   restarter restarts it exactly once, it serves again; the other replica is never restarted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.rig.incident import wait

from .compose import (
    COMPOSE_FILE,
)
from .compose_stack import STATE, nanoseconds, state_listing
from .image import DOCKERFILE
from .report import TIMINGS
from .rig import NO_MEMORY, Recorder, metrics

pytestmark = pytest.mark.containers



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


