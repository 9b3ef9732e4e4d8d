"""The shipped Deployment (contrib/kubernetes/vllm-deployment.yaml) run as the kubelet runs it (tests/containers/
kubelet.py), against real vLLM 0.32 (CPU build, tiny model, --max-num-seqs 2) started as the container's PID 1.

The phases, in order, on one pod (one vLLM boot, one restart):

0. boot: the emptyDir is `drwxrwsrwx root:1000`; while the model loads, startup fails (and liveness and readiness
   do not run); once vLLM serves, startup passes, readiness turns ready; 0 kills; the probes keep their memory in
   a private uid-1000/ (0700) in the emptyDir, and no line says the state directory was refused.
1. saturated: 6 clients of 1000-token generations: 0 kills, liveness never fails (readiness may).
2. (test_frozen.py, at once with a compose replica's) frozen: SIGSTOP of VLLM::EngineCore under load: readiness fails first; liveness fails only on proof, and the
   rig kills the container within the check's --stuck-seconds (the manifest sets none: the default, 120 s) + 2
   periods; the container restarts once, loads, passes startup again on the kept emptyDir; restartCount is 1.
"""

from __future__ import annotations

import os
import stat
import time

import pytest

from tests.rig.incident import IncidentLoad, wait
from tests.rig.vllm_server import saturated

from .kubelet import STATE_VOLUME, describe
from .kubelet_pod import diag, no_kills
from .rig import NO_MEMORY, metrics

pytestmark = pytest.mark.containers

LOAD_TOKENS = 1000


def test_k0_boot(pod):
    k = pod
    spec = k.spec
    state = k.volumes[STATE_VOLUME]
    st = os.lstat(state)
    # the emptyDir as the kubelet makes it with fsGroup (what issue 36's case 1 was about)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, spec.fs_group, 0o2777), describe(state)
    wait("vLLM to serve /metrics (model loaded)", lambda: no_kills(k) or metrics(k.url, timeout=2), 240, 1.0,
         diag=lambda: diag(k))
    t_serving = k.event("vLLM serves (/metrics answers from the test): model loaded")
    startup = k.spec.probes["startup"]
    wait("startup to pass", lambda: no_kills(k) or k.started, 2 * startup.period + startup.timeout + 5, 0.5,
         diag=lambda: diag(k))
    t_started = min(r.start for r in k.runs_of("startup") if r.counted == "started")
    ready = k.spec.probes["readiness"]
    wait("readiness to pass", lambda: no_kills(k) or k.ready, 2 * ready.period + ready.timeout + 5, 0.5,
         diag=lambda: diag(k))
    loading = [r for r in k.runs_of("startup", t1=t_serving) if r.end < t_serving]
    before = [r for r in k.runs if r.kind != "startup" and r.start < t_started]
    private = state / f"uid-{spec.run_as_user}"
    files = sorted(p.name for p in private.iterdir()) if private.is_dir() else []
    k.measured["boot"] = {
        "serving after": t_serving - k.t0, "started after": t_started - k.t0,
        "startup fails while loading": len(loading), "loading lines": sorted({r.line[:140] for r in loading})[:3],
        "first pass": [r.line for r in k.runs_of("startup") if r.exit == 0][:1],
        "emptyDir": describe(state), "private": describe(private) if private.exists() else None, "files": files,
    }
    no_kills(k)
    assert loading, "no startup run while the model loaded: the boot was too fast to test"
    assert all(r.exit == 1 for r in loading), [(r.exit, r.line) for r in loading]
    assert len(loading) < startup.failure_threshold
    assert not before, f"liveness/readiness ran before startup passed: {[(r.kind, r.line) for r in before]}"
    assert all(r.exit == 0 for r in k.runs_of("liveness")), [(r.exit, r.line) for r in k.runs_of("liveness")]
    pst = os.lstat(private)
    # 0700 and the runner's; the setgid bit is the kernel's (a directory made in a setgid directory inherits it)
    assert (pst.st_uid, pst.st_mode & 0o777, stat.S_ISDIR(pst.st_mode)) == (spec.run_as_user, 0o700, True), \
        describe(private)
    assert any(f.endswith(".json") for f in files), files
    assert sorted(p.name for p in state.iterdir()) == [private.name], list(state.iterdir())
    said = [r.line for r in k.runs if any(w in r.line for w in NO_MEMORY)]
    assert not said, said


def test_k1_saturated(pod):
    k = pod
    no_kills(k)
    period = max(p.period for p in k.spec.probes.values())
    load = IncidentLoad(k.url, 6, max_tokens=LOAD_TOKENS)
    try:
        wait("running=2 and waiting>=1", lambda: (m := metrics(k.url)) and saturated(m), 60, 0.5,
             diag=lambda: diag(k))
        t_sat = k.event("6 clients x 1000 tokens on --max-num-seqs 2: saturated (running 2, waiting >= 1)")
        samples = []
        end = time.time() + 3 * period + 2
        while time.time() < end:
            samples.append(bool((m := metrics(k.url)) and saturated(m)))
            time.sleep(1.0)
        t_end = k.event("the load stops")
    finally:
        load.stop()
    runs = k.runs_of(t0=t_sat, t1=t_end)
    live = [r for r in runs if r.kind == "liveness"]
    ready = [r for r in runs if r.kind == "readiness"]
    k.measured["saturated"] = {
        "seconds": t_end - t_sat, "saturated samples": (sum(samples), len(samples)),
        "liveness": [(r.exit, r.line[:120]) for r in live], "readiness": [(r.exit, r.line[:120]) for r in ready],
        "longest run": max((r.end - r.start for r in runs), default=0.0),
    }
    no_kills(k)
    assert sum(samples) * 2 >= len(samples), f"not saturated: {samples}"
    assert len(live) >= 2, live
    assert all(r.exit == 0 for r in live), [(r.exit, r.line) for r in live]


