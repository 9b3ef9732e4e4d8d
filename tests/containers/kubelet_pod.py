"""The shipped Deployment's pod as the containers tier starts it (tests/containers/kubelet.py's rig kubelet), and what
the report says of it. The tests are test_kubelet.py and test_frozen.py; the session fixture is conftest.py's `pod`."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Settings
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv, free_port

from .kubelet import Kubelet, KubeletRigError, read_manifest
from .report import REPORT, TIMINGS
from .rig import RigError, check_venv


def started_pod(lock_how: str) -> Iterator[Kubelet]:
    """The shipped Deployment's pod started by the rig's kubelet (the caller holds the heavy lock), stopped at the
    end, its report kept."""
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
    k = Kubelet(spec, pod_dir, f"http://127.0.0.1:{free_port()}", venv, model, prefix / "bin" / "check_vllm")
    k.measured["lock"] = lock_how
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
    TIMINGS["kubelet rig: whole pod"] = time.monotonic() - t_all


def diag(k: Kubelet) -> str:
    runs = k.runs[-6:]
    log = k.server.log_tail(25) if k.server else "(no container)"
    return (f"kills {k.kills}; restarts {k.restart_count}; started {k.started}; ready {k.ready}\nlast runs: "
            + "\n".join(f"  {r.kind} exit {r.exit}: {r.line}" for r in runs) + f"\nvLLM log tail:\n{log}")


def no_kills(k: Kubelet) -> None:
    if k.kills:
        raise AssertionError(f"the rig killed the container: {k.kills}\n{diag(k)}")


def stuck_seconds(command: tuple[str, ...]) -> float:
    """--stuck-seconds of the manifest's liveness command, else the check's default."""
    argv = list(command)
    if "--stuck-seconds" in argv:
        return float(argv[argv.index("--stuck-seconds") + 1])
    return Settings().stuck_seconds


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
