"""The shipped Deployment (contrib/kubernetes/vllm-deployment.yaml) run as the kubelet runs it (tests/containers/
kubelet.py), against real vLLM 0.32 (CPU build, tiny model, --max-num-seqs 2) started as the container's PID 1.

The phases, in order, on one pod (one vLLM boot, one restart):

0. boot: the emptyDir is `drwxrwsrwx root:1000`; while the model loads, startup fails (and liveness and readiness
   do not run); once vLLM serves, startup passes, readiness turns ready; 0 kills; the probes keep their memory in
   a private uid-1000/ (0700) in the emptyDir, and no line says the state directory was refused.
1. saturated: 6 clients of 1000-token generations: 0 kills, liveness never fails (readiness may).
2. frozen: SIGSTOP of VLLM::EngineCore under load: readiness fails first; liveness fails only on proof, and the
   rig kills the container within the check's --stuck-seconds (the manifest sets none: the default, 120 s) + 2
   periods; the container restarts once, loads, passes startup again on the kept emptyDir; restartCount is 1.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import tempfile
import time
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Settings
from tests.rig.heavy_lock import HeavyLock
from tests.rig.incident import IncidentLoad, wait
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv, free_port, saturated

from .conftest import REPORT, TIMINGS
from .kubelet import STATE_VOLUME, Kubelet, KubeletRigError, describe, read_manifest
from .rig import RigError, check_venv, metrics

pytestmark = pytest.mark.containers

LOAD_TOKENS = 1000
#: what a probe says when it cannot keep its memory (issue 36: it must say so, and must not be the case here)
NO_MEMORY = ("refusing the state directory", "state not saved", "judged on this run alone")


@pytest.fixture(scope="module")
def pod():
    t_all = time.monotonic()
    try:
        venv = ensure_venv()
        model = ensure_tiny_model(venv)
        prefix = check_venv()
        spec = read_manifest()
    except (VllmSetupError, RigError, KubeletRigError) as exc:
        pytest.fail(f"kubelet rig: cannot prepare: {exc}", pytrace=False)
    report_dir = Path(os.environ.get("CONTAINERS_REPORT_DIR") or tempfile.mkdtemp(prefix="kubelet-"))
    pod_dir = Path(tempfile.mkdtemp(prefix="kubelet-pod-", dir=report_dir))
    pod_dir.chmod(0o755)
    lock = HeavyLock(say=lambda msg: print(msg, flush=True))
    t = time.monotonic()
    with lock:
        TIMINGS["kubelet rig: waiting for the heavy lock"] = time.monotonic() - t
        k = Kubelet(spec, pod_dir, f"http://127.0.0.1:{free_port()}", venv, model, prefix / "bin" / "check_vllm")
        k.measured["lock"] = lock.how
        try:
            try:
                k.start()
            except (KubeletRigError, OSError) as exc:
                pytest.fail(f"kubelet rig: the pod did not start: {exc}", pytrace=False)
            yield k
        finally:
            k.stop()
            REPORT["kubelet rig: measured"] = summary(k)
            REPORT["kubelet rig: timeline"] = timeline(k)
            (report_dir / "kubelet-timeline.txt").write_text(
                REPORT["kubelet rig: measured"] + "\n\n" + REPORT["kubelet rig: timeline"] + "\n")
    TIMINGS["kubelet rig: whole module (lock held)"] = time.monotonic() - t_all


def _diag(k: Kubelet) -> str:
    runs = k.runs[-6:]
    log = k.server.log_tail(25) if k.server else "(no container)"
    return (f"kills {k.kills}; restarts {k.restart_count}; started {k.started}; ready {k.ready}\nlast runs: "
            + "\n".join(f"  {r.kind} exit {r.exit}: {r.line}" for r in runs) + f"\nvLLM log tail:\n{log}")


def no_kills(k: Kubelet) -> None:
    if k.kills:
        raise AssertionError(f"the rig killed the container: {k.kills}\n{_diag(k)}")


def stuck_seconds(command: tuple[str, ...]) -> float:
    """--stuck-seconds of the manifest's liveness command, else the check's default."""
    argv = list(command)
    if "--stuck-seconds" in argv:
        return float(argv[argv.index("--stuck-seconds") + 1])
    return Settings().stuck_seconds


def test_k0_boot(pod):
    k = pod
    spec = k.spec
    state = k.volumes[STATE_VOLUME]
    st = os.lstat(state)
    # the emptyDir as the kubelet makes it with fsGroup (what issue 36's case 1 was about)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, spec.fs_group, 0o2777), describe(state)
    wait("vLLM to serve /metrics (model loaded)", lambda: no_kills(k) or metrics(k.url, timeout=2), 240, 1.0,
         diag=lambda: _diag(k))
    t_serving = k.event("vLLM serves (/metrics answers from the test): model loaded")
    startup = k.spec.probes["startup"]
    wait("startup to pass", lambda: no_kills(k) or k.started, 2 * startup.period + startup.timeout + 5, 0.5,
         diag=lambda: _diag(k))
    t_started = min(r.start for r in k.runs_of("startup") if r.counted == "started")
    ready = k.spec.probes["readiness"]
    wait("readiness to pass", lambda: no_kills(k) or k.ready, 2 * ready.period + ready.timeout + 5, 0.5,
         diag=lambda: _diag(k))
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
             diag=lambda: _diag(k))
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


def test_k2_frozen(pod):
    k = pod
    no_kills(k)
    live = k.spec.probes["liveness"]
    stuck = stuck_seconds(live.command)
    budget = stuck + 2 * live.period
    load = IncidentLoad(k.url, 3, max_tokens=LOAD_TOKENS)
    try:
        wait("generation under way", lambda: sum(load.chunks) > 50, 60, 0.5, diag=lambda: _diag(k))
        pid = k.engine_core_pid()
        os.kill(pid, signal.SIGSTOP)
        t_stop = k.event(f"SIGSTOP to VLLM::EngineCore (pid {pid})")
        wait("the rig to kill the container (liveness failed)", lambda: k.kills, budget + live.timeout + 30, 0.5,
             diag=lambda: _diag(k))
        t_kill = k.kills[0][0]
        wait("the new container to serve", lambda: k.restart_count and metrics(k.url, timeout=2), 240, 1.0,
             diag=lambda: _diag(k))
        t_back = k.event("vLLM serves again (model reloaded)")
        startup, ready = k.spec.probes["startup"], k.spec.probes["readiness"]
        wait("startup to pass again", lambda: k.started, 2 * startup.period + startup.timeout + 5, 0.5,
             diag=lambda: _diag(k))
        wait("ready again", lambda: k.ready, 2 * ready.period + ready.timeout + 5, 0.5, diag=lambda: _diag(k))
    finally:
        load.stop()
    time.sleep(2 * live.period + 1)   # two more liveness periods: nothing else happens
    t_end = k.event("end")
    failing = [r for r in k.runs_of("liveness", t_stop) if r.exit != 0]
    not_ready = [r for r in k.runs_of("readiness", t_stop, t_kill) if r.exit != 0]
    after = k.runs_of(t0=t_kill)
    k.measured["frozen"] = {
        "stuck seconds": stuck, "budget": budget, "killed after": t_kill - t_stop,
        "first readiness failure after": (not_ready[0].start - t_stop) if not_ready else None,
        "failing liveness": [r.line for r in failing], "kill": k.kills[0][1],
        "serving again after": t_back - t_stop, "restarts": k.restart_count, "kills": len(k.kills),
        "after restart": [(r.kind, r.exit, r.line[:150]) for r in after[:6]],
        "liveness passes before the kill": sum(r.exit == 0 for r in k.runs_of("liveness", t_stop, t_kill)),
    }
    k.measured["end"] = t_end
    assert len(failing) == 1, [r.line for r in failing]
    assert "stuck" in failing[0].line, failing[0].line
    assert t_kill - t_stop <= budget + 2.0, (t_kill - t_stop, budget)
    assert t_kill - t_stop >= stuck, f"killed {t_kill - t_stop:.1f} s after the freeze, before --stuck-seconds {stuck}"
    assert not_ready and not_ready[0].start < t_kill, "readiness did not fail before the kill"
    assert k.restart_count == 1 and len(k.kills) == 1, (k.restart_count, k.kills)
    assert k.container == 1
    assert all(r.exit == 0 for r in k.runs_of("liveness", t_back)), \
        [(r.exit, r.line) for r in k.runs_of("liveness", t_back)]
    # the emptyDir outlived the container: the new container's first reading found the old process's baseline
    first = next(r for r in k.runs_of("startup", t_kill) if r.exit == 0)
    assert first.container == 1 and "restarted" in first.line, first.line
    said = [r.line for r in k.runs if any(w in r.line for w in NO_MEMORY)]
    assert not said, said
    _post_mortem_kept(k, pid)


def _post_mortem_kept(k: Kubelet, engine_core: int) -> None:
    """The manifest's preStop hook kept the proof in the state volume before the kill: the evidence (stuck), the
    last page, and py-spy's dump of the frozen EngineCore, read without waking it (--nonblocking)."""
    assert k.pre_stops, "the preStop hook did not run before the kill"
    when, took, said = k.pre_stops[0]
    k.measured["preStop"] = {"took": took, "said": said}
    assert said.startswith("exit 0: ") and ": post-mortem: post-mortem in " in said, said
    inside = Path(said.split("post-mortem in ", 1)[1].split(" (", 1)[0])
    mount = Path(k.spec.mounts[STATE_VOLUME])
    bundle = k.volumes[STATE_VOLUME] / inside.relative_to(mount)
    # 0700 and the runner's (the setgid bit is the emptyDir's, inherited as the state directory's is)
    assert bundle.stat().st_mode & 0o777 == 0o700 and bundle.stat().st_uid == k.spec.run_as_user
    evidence = json.loads((bundle / "evidence.json").read_text())
    assert evidence["verdict"]["word"] == "stuck", evidence["verdict"]
    assert (bundle / "metrics.txt").read_text().startswith("HTTP 200")
    dump = (bundle / f"py-spy-{engine_core}.txt").read_text()
    assert "vllm/v1/engine/core.py" in dump, dump[:2000]
    assert took < 20 + 3, took


# --------------------------------------------------------------------------- the report

def summary(k: Kubelet) -> str:
    m = k.measured
    s = k.spec
    out = [f"manifest: {k.manifest}",
           f"pod: runAsUser {s.run_as_user}, runAsGroup {s.run_as_group}, fsGroup {s.fs_group}, env {s.env}, "
           f"terminationGracePeriodSeconds {s.grace:g} (default when unset: 30), restartPolicy {s.restart_policy}",
           *(f"{kind}Probe: period {p.period:g}s timeout {p.timeout:g}s failureThreshold {p.failure_threshold} "
             f"successThreshold {p.success_threshold}: {k.command_line(kind)}" for kind, p in s.probes.items()),
           "(the one substitution: -u's port is the test's; the emptyDir is bound at the manifest's mountPath)",
           f"heavy lock: {m.get('lock')}"]
    b = m.get("boot") or {}
    if b:
        out += [f"boot: vLLM serving at {b['serving after']:.1f}s, startup passed at {b['started after']:.1f}s; "
                f"{b['startup fails while loading']} startup failures while loading (threshold "
                f"{s.probes['startup'].failure_threshold}); emptyDir {b['emptyDir']}; private {b['private']} "
                f"holding {b['files']}",
                *(f"  while loading: {line}" for line in b["loading lines"]),
                *(f"  first pass: {line}" for line in b["first pass"])]
    sat = m.get("saturated") or {}
    if sat:
        out += [f"saturated {sat['seconds']:.0f}s ({sat['saturated samples'][0]}/{sat['saturated samples'][1]} host "
                f"samples saturated), longest probe run {sat['longest run']:.1f}s",
                *(f"  liveness exit {e}: {line}" for e, line in sat["liveness"]),
                *(f"  readiness exit {e}: {line}" for e, line in sat["readiness"])]
    f = m.get("frozen") or {}
    if f:
        out += [f"frozen: --stuck-seconds {f['stuck seconds']:g} (the manifest sets none: the check's default); "
                f"killed {f['killed after']:.1f}s after the SIGSTOP (budget {f['budget']:g}s); readiness failed "
                f"{f['first readiness failure after']}s after it; liveness passed {f['liveness passes before the kill']}"
                f" times before; serving again at {f['serving again after']:.1f}s; kills {f['kills']}, "
                f"restartCount {f['restarts']}",
                f"  kill: {f['kill']}",
                *(f"  after the restart: {kind} exit {e}: {line}" for kind, e, line in f["after restart"])]
    return "\n".join(out)


def timeline(k: Kubelet) -> str:
    rows: list[tuple[float, str, str]] = [(at, ">>>", text) for at, text in k.events]
    for r in k.runs:
        what = f"{r.line}  ({r.end - r.start:.1f}s)" + (f"  => {r.counted}" if r.counted else "")
        rows.append((r.start, f"{r.kind} exit {'timeout' if r.exit is None else r.exit}", what))
    rows.sort(key=lambda r: r[0])
    lines = [f"{'time':>6}  {'ctr':>3}  {'source':<20} what", "-" * 100]
    for at, source, what in rows:
        lines.append(f"{at - k.t0:6.1f}  {k.container_at(at):>3}  {source:<20} {what}")
    lines.append("(time: seconds since the pod started; ctr: the container (0, then 1 after the restart); every probe "
                 "run is the manifest's command as the rig's kubelet ran it, its first line of output)")
    return "\n".join(lines)
