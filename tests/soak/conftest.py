"""The soak tier: the incident tier's rig (real vLLM under supervisord, real Icinga 2 with the shipped
CheckCommand and EventCommand restarting through supervisorctl) under seeded traffic and seeded faults.

    bash .ci/incident-deps.sh && python -m pytest -m soak tests/soak -q      (or: tox -e soak)
    SOAK_MINUTES=60 SOAK_SEED=1234 tox -e soak                                 (the long one, shipped defaults)

The rig is built from the incident's parts in tests/rig (Supervisord, IcingaWithTimes, World, plugin_dir); only the
service's settings differ (tests/soak/settings.py). The whole soak runs once per session (the `soaked`
fixture), under the machine's heavy lock; the tests then judge its windows. The report (JSON and
markdown) goes to $SOAK_REPORT_DIR (tox: the env's tmp dir) or the session's temp dir.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.rig.heavy_lock import HeavyLock
from tests.rig.incident import IcingaWithTimes, Watchdog, World, plugin_dir, tokens
from tests.rig.incident import service_conf as incident_service
from tests.rig.monitoring import ensure_installed, free_port
from tests.rig.supervisor import Supervisord, SupervisorError
from tests.rig.tiers import mark_tier, write_reports
from tests.rig.vllm_server import VllmSetupError, ensure_tiny_model, ensure_venv

from . import faults as faults_mod
from .report import analyse, markdown
from .sampler import Sampler
from .settings import Soak, from_env
from .soak import Run
from .traffic import WORDS, Plan, Traffic

HERE = Path(__file__).resolve().parent
REPORT: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    mark_tier(items, HERE, "soak")


def pytest_terminal_summary(terminalreporter):
    write_reports(terminalreporter, REPORT)


def service_conf(soak: Soak, url: str, state_dir: Path, restart: list[str], log: Path) -> str:
    return incident_service(url, state_dir, restart, log, soak.check_vars, soak.handler_vars,
                            (soak.check_interval, soak.retry_interval, soak.max_attempts, soak.check_timeout))


def _prepare():
    ensure_installed()  # Icinga 2 (.ci/monitoring-deps.sh)
    if not (os.access("/usr/bin/supervisord", os.X_OK) and os.access("/usr/bin/supervisorctl", os.X_OK)):
        pytest.fail("supervisord / supervisorctl are not installed: run .ci/incident-deps.sh", pytrace=False)
    try:
        venv = ensure_venv()
        return venv, ensure_tiny_model(venv)
    except VllmSetupError as exc:
        pytest.fail(f"soak tier: cannot prepare vLLM: {exc}", pytrace=False)


def _tokens_per_word(url: str) -> float:
    text = " ".join(WORDS[i % len(WORDS)] for i in range(400))
    return tokens(url, messages=[{"role": "user", "content": text}], add_generation_prompt=True) / 400


@pytest.fixture(scope="session")
def soaked(tmp_path_factory):
    """The whole soak, run once: yields (Run, analysis)."""
    t_all = time.time()
    soak = from_env()
    schedule = faults_mod.schedule(soak)
    print(f"\nsoak: {soak.describe()}\nsoak: schedule: {faults_mod.describe(schedule)}", flush=True)
    venv, model = _prepare()
    root = tmp_path_factory.mktemp("soak")
    report_dir = Path(os.environ.get("SOAK_REPORT_DIR") or root)
    report_dir.mkdir(parents=True, exist_ok=True)
    lock = HeavyLock(say=lambda msg: print(msg, flush=True))
    t_lock = time.time()
    with lock:
        waited = time.time() - t_lock
        sup = Supervisord(root / "supervisor", venv, model, free_port())
        state_dir, handler_log = root / "state", root / "check_vllm_restart.log"
        restart = sup.ctl_argv("restart", "vllm")
        ic = IcingaWithTimes(root / "icinga2", plugin_dir(root), service_conf(soak, sup.url, state_dir, restart,
                                                                        handler_log))
        run: Run | None = None
        try:
            try:
                sup.start()
            except SupervisorError as exc:
                pytest.fail(f"soak tier: supervisord did not start: {exc}", pytrace=False)
            checked = ic.validate()
            if checked.returncode != 0:
                pytest.fail(f"icinga2 rejected the config:\n{checked.stdout[-4000:]}", pytrace=False)
            ic.start()
            w = World(root=root, sup=sup, icinga=ic, state_dir=state_dir, handler_log=handler_log,
                      watchdog=Watchdog(sup.url, root / "unused-watchdog.jsonl"), restart_command=restart,
                      t0=sup.start_time)
            plan = Plan(soak.seed)
            run = Run(soak, w, Traffic(sup.url, plan, 900 if soak.long else 180),
                      Sampler(sup.url, state_dir, soak.sample_every))
            run.open("boot", "boot")
            try:
                sup.wait_healthy(300)
            except SupervisorError as exc:
                pytest.fail(f"soak tier: vLLM did not start under supervisord: {exc}", pytrace=False)
            run.sampler.start()
            w.start_sampler()
            run.first_ok_after(sup.start_time, 300)
            plan.tokens_per_word = _tokens_per_word(sup.url)
            print(f"soak: traffic (seed {soak.seed}, {plan.tokens_per_word:.2f} tokens/word): {plan.preview()}",
                  flush=True)
            run.traffic.start()
            try:
                run.run(schedule, sup.start_time + soak.minutes * 60)
            except (AssertionError, SupervisorError, OSError) as exc:  # judged by test_soak, with the report
                run.error = f"{type(exc).__name__}: {exc}"[:4000]
                w.event(f"the run stopped: {run.error[:200]}")
        finally:  # every step on its own: a failing one must not leave a vLLM running (the machine's 2 cores)
            steps = [run.close, run.traffic.stop, run.sampler.stop, run.w.stop_sampler] if run is not None else []
            for step in [*steps, ic.stop]:
                try:
                    step()
                except Exception as exc:  # noqa: BLE001 - reported, the tear-down goes on
                    print(f"soak: tear-down step {step.__qualname__} failed: {exc!r}", flush=True)
            killed = sup.stop()
    assert run is not None
    result = analyse(run, schedule)
    result["meta"] = {"seed": soak.seed, "minutes": soak.minutes, "settings": soak.describe(),
                      "schedule": faults_mod.describe(schedule), "lock": lock.how, "lock_waited": waited,
                      "wall_seconds": time.time() - t_all, "killed_by_hand": killed,
                      "traffic": {"bursts": run.traffic.bursts, "gaps": run.traffic.gaps,
                                  "tokens_per_word": run.traffic.plan.tokens_per_word}}
    (report_dir / "soak-report.json").write_text(json.dumps(result, indent=1, default=str))
    md = markdown(result)
    (report_dir / "soak-report.md").write_text(md + "\n\n## Timeline\n\n```\n" + run.w.timeline() + "\n```\n")
    (report_dir / "soak-requests.json").write_text(json.dumps(run.traffic.dump(), default=str))
    REPORT["soak: report"] = md + f"\n\nfiles: {report_dir}/soak-report.md, soak-report.json; logs: {root}"
    yield run, result
