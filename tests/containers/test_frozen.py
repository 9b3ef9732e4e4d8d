"""The frozen engine, in the shipped compose stack and in the shipped Deployment's pod AT ONCE: both wait out the
check's default --stuck-seconds (120 s, set by neither file), so the tier waits it once (issue 53), each on its own
server, each judged by its own test.

- compose (contrib/docker/compose.yaml): SIGSTOP of one replica's VLLM::EngineCore: it turns `unhealthy` within
  --stuck-seconds + 2 intervals + the timeout, the restarter restarts it exactly once (COOLDOWN 900, STOP_TIMEOUT 60
  as shipped), its POST_MORTEM keeps the proof first, it serves again; the other replica's every health run passes,
  it is never restarted (no restart event, StartedAt unchanged).
- the pod (contrib/kubernetes/vllm-deployment.yaml): SIGSTOP of VLLM::EngineCore under load: readiness fails first;
  liveness fails only on proof, and the rig's kubelet kills the container within --stuck-seconds + 2 periods; its
  preStop hook keeps the proof; the container restarts once, loads, passes startup again on the kept emptyDir.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Settings
from tests.rig.incident import IncidentLoad, wait

from .compose_stack import Stack, parse_duration, state_listing
from .kubelet import STATE_VOLUME, Kubelet
from .kubelet_pod import diag, no_kills, stuck_seconds
from .report import TIMINGS
from .rig import NO_MEMORY, metrics, parse_time

pytestmark = pytest.mark.containers

LOAD_TOKENS = 1000


@pytest.fixture(scope="module")
def frozen(stack, pod) -> dict[str, Future]:
    """Both freezes run at once, to their end; each test below reads its own outcome."""
    with ThreadPoolExecutor(2, thread_name_prefix="frozen") as pool:
        return {"compose": pool.submit(replica_frozen, stack), "pod": pool.submit(pod_frozen, pod)}


def test_compose_one_replica_frozen_restarted_once_other_untouched(frozen):
    frozen["compose"].result()


def test_pod_frozen_killed_on_proof_restarted_once(frozen):
    frozen["pod"].result()


def replica_frozen(s: Stack) -> None:
    """One replica's engine stopped: unhealthy on proof, restarted once by the shipped restarter, cured; the other
    replica untouched."""
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


def pod_frozen(k: Kubelet) -> None:
    """The pod's engine stopped under load: readiness fails first, liveness only on proof, one kill, one restart."""
    no_kills(k)
    live = k.spec.probes["liveness"]
    stuck = stuck_seconds(live.command)
    budget = stuck + 2 * live.period
    load = IncidentLoad(k.url, 3, max_tokens=LOAD_TOKENS)
    try:
        wait("generation under way", lambda: sum(load.chunks) > 50, 60, 0.5, diag=lambda: diag(k))
        pid = k.engine_core_pid()
        os.kill(pid, signal.SIGSTOP)
        t_stop = k.event(f"SIGSTOP to VLLM::EngineCore (pid {pid})")
        wait("the rig to kill the container (liveness failed)", lambda: k.kills, budget + live.timeout + 30, 0.5,
             diag=lambda: diag(k))
        t_kill = k.kills[0][0]
        wait("the new container to serve", lambda: k.restart_count and metrics(k.url, timeout=2), 240, 1.0,
             diag=lambda: diag(k))
        t_back = k.event("vLLM serves again (model reloaded)")
        startup, ready = k.spec.probes["startup"], k.spec.probes["readiness"]
        wait("startup to pass again", lambda: k.started, 2 * startup.period + startup.timeout + 5, 0.5,
             diag=lambda: diag(k))
        wait("ready again", lambda: k.ready, 2 * ready.period + ready.timeout + 5, 0.5, diag=lambda: diag(k))
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
    # the product's promise, timed: the manifest's --post-mortem-budget 20 bounds the hook's work; 3 s is its
    # interpreter's start, outside the budget (a hook over it would eat the kubelet's termination grace)
    assert took < 20 + 3, took
