"""Every verdict's answer in every front end (issue 52, point 2): tools/frontends.py computes each front end's answer
with its own code; the committed table (docs/frontends.md) is the golden. Every verdict row times every front end is
walked against it, and the invariants that matter between front ends are held on the computed answers."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from check_vllm.contract import vocab
from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, OK, UNKNOWN, WARNING
from check_vllm.netdata import alarms

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, mod)
    spec.loader.exec_module(mod)
    return mod


frontends = _load("frontends")
tool = _load("update_readme")
ROWS = frontends.walk()
EVERY = [(w.word, s) for w in vocab.VERDICTS for s in w.states]


def committed() -> dict[tuple[str, str], dict[str, str]]:
    text = tool.FRONTENDS.read_text()
    assert text.count(tool.F_START) == text.count(tool.F_END) == 1
    return frontends.parse(text.split(tool.F_START, 1)[1].split(tool.F_END, 1)[0])


def test_every_verdict_row_times_every_front_end_is_in_the_table():
    """A verdict or a front end's column added without its answers, or an answer changed without the table, fails
    here, naming each pair (regenerate with `python tools/update_readme.py`, then read the diff)."""
    table = committed()
    problems = []
    for row in ROWS:
        key = (row.word, CODE_NAMES[row.state])
        have = table.get(key)
        if have is None:
            problems.append(f"{key}: no row in docs/frontends.md")
            continue
        for column, cell in frontends.cells(row).items():
            if column not in have:
                problems.append(f"{key} x {column}: no such column in docs/frontends.md")
            elif have[column] != cell:
                problems.append(f"{key} x {column}: the table says {have[column]!r}, the front end answers {cell!r}")
    extra = set(table) - {(w, CODE_NAMES[s]) for w, s in EVERY}
    problems += [f"{key}: in docs/frontends.md, not a verdict of the contract" for key in sorted(extra)]
    assert problems == [], "docs/frontends.md is stale (run `python tools/update_readme.py`):\n" + "\n".join(problems)
    assert tool.render_frontends(tool.FRONTENDS.read_text()) == tool.FRONTENDS.read_text()


def test_the_walk_is_every_word_at_every_state_once():
    assert [(r.word, r.state) for r in ROWS] == EVERY
    assert max(Counter(EVERY).values()) == 1


def test_every_front_end_has_its_columns():
    """The front ends CONTRIBUTING names, and the probes they share, each answer in the table."""
    named = re.search(r"the front ends \(([^)]*)\)", (ROOT / "CONTRIBUTING.md").read_text())
    assert named is not None
    fronts = set(re.findall(r"`([a-z_]+)`", named.group(1))) | {"probes"}
    assert fronts == {front for front, _ in frontends.COLUMNS.values()}, fronts
    for front in fronts:
        assert (ROOT / "check_vllm" / front).is_dir(), front


def test_a_stale_cell_is_named():
    text = tool.FRONTENDS.read_text()
    stale = text.replace("| `stuck` | CRITICAL | 2 CRITICAL | **restart**; over the fleet budget: refuse |",
                         "| `stuck` | CRITICAL | 2 CRITICAL | skip |")
    assert stale != text
    table = frontends.parse(stale.split(tool.F_START, 1)[1])
    assert table[("stuck", "CRITICAL")]["handler"] == "skip"
    assert tool.render_frontends(stale) != stale


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.word}-{CODE_NAMES[r.state]}")
def test_the_check_exits_with_the_state(row):
    assert row.exit == row.state


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.word}-{CODE_NAMES[r.state]}")
def test_only_a_restartable_word_at_critical_restarts_and_fails_liveness(row):
    proof = row.word in vocab.RESTARTABLE and row.state == CRITICAL
    assert row.handler.act is proof and row.handler.kind == ("restart" if proof else "skip"), row.handler
    assert row.liveness.passed is not proof, row.liveness
    # --proxy adds the proxy's CRITICAL (its handler's own option), and nothing else
    assert row.handler_proxy.act is (proof or (row.word == vocab.PROXY and row.state == CRITICAL))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.word}-{CODE_NAMES[r.state]}")
def test_over_the_fleet_budget_neither_the_handler_nor_liveness_restarts(row):
    """The handler and the liveness probe (whose fail is the kubelet's or Docker's restart) keep one budget: over it
    neither restarts, each saying why; elsewhere it changes nothing."""
    proof = row.word in vocab.RESTARTABLE and row.state == CRITICAL
    assert not row.handler_over.act and row.liveness_over.passed, (row.handler_over, row.liveness_over)
    assert (row.handler_over.kind == "refuse") is proof and (row.liveness_over != row.liveness) is proof
    if proof:
        assert row.liveness_over.in_spite and row.liveness_over.why.endswith("not restarting, a person decides")
        assert "over the fleet budget: refuse" in frontends.cells(row)["handler"]
        assert "over the fleet budget: pass, in spite of it" in frontends.cells(row)["liveness"]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.word}-{CODE_NAMES[r.state]}")
def test_what_the_monitoring_side_cannot_judge_takes_nothing_out(row):
    if row.state == UNKNOWN:
        assert row.liveness.passed and row.readiness.passed and not row.handler.act, row
        assert row.rotation == vocab.ABSTAIN and row.reply.admin == "ready" and not row.reply.health


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.word}-{CODE_NAMES[r.state]}")
def test_readiness_fails_exactly_where_the_rotation_takes_it_out(row):
    out = row.rotation in (vocab.DRAIN, vocab.FAIL, vocab.MARK_DOWN)
    assert row.readiness.passed is not out, (row.rotation, row.readiness)
    assert row.reply.name == row.rotation
    assert (row.reply.admin == "drain") is out, row.reply


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.word}-{CODE_NAMES[r.state]}")
def test_the_netdata_alarm_follows_the_state(row):
    """The defect this fixes: `unresponsive` at CRITICAL raised only a WARNING (the alarm read the word)."""
    assert row.dimension == row.word.replace(" ", "_") and row.value == 1 + row.state
    level = row.alarm[1] if row.alarm else alarms.NONE
    want = {OK: alarms.NONE, CRITICAL: alarms.CRIT}.get(row.state, alarms.NONE if row.word in alarms.QUIET
                                                        else alarms.WARN)
    assert level == want, (row.word, row.state, row.alarm)
    if row.alarm:
        assert row.alarm[0] == f"vllm_{row.dimension}"


def test_unresponsive_at_critical_raises_its_alarm_critical():
    rows = {(r.word, r.state): r for r in ROWS}
    assert rows[(vocab.UNRESPONSIVE, WARNING)].alarm == ("vllm_unresponsive", alarms.WARN)
    assert rows[(vocab.UNRESPONSIVE, CRITICAL)].alarm == ("vllm_unresponsive", alarms.CRIT)


def test_no_metrics_with_its_model_list_answering_passes_startup_and_says_why():
    row = next(r for r in ROWS if (r.word, r.state) == (vocab.NO_METRICS, WARNING))
    names = [name for name, _ in frontends.STARTUP_ALSO]
    listed = dict(zip(names, row.startup_also, strict=True))["its model listed"]
    assert listed.passed and listed.why.endswith("(it lists its model: loaded)"), listed
    assert "it lists its model: loaded" in frontends.cells(row)["startup"]


def test_a_router_with_no_model_loaded_has_started():
    """llama.cpp's router with no model loaded answers its model list and loads none for the check: `no metrics`
    WARNING with Verdict.loaded, so its startup probe passes (the kubelet must not kill it for ever)."""
    from check_vllm.contract.defaults import Settings
    from check_vllm.contract.engines import BY_KEY
    from check_vllm.contract.kept import Memory
    from check_vllm.contract.values import Evidence
    from check_vllm.judge.no_reading import assess_failure
    from check_vllm.probes.answers import STARTUP, Seen, answer
    from check_vllm.server import router

    failure = router._none(BY_KEY["llamacpp"], router.Listed((), (), Counter(unloaded=2)), [])
    verdict = assess_failure(Memory(), Evidence(failure), Settings(), 1000.0)
    assert (verdict.word, verdict.code, verdict.loaded) == (vocab.NO_METRICS, WARNING, True), verdict
    a = answer(STARTUP, Seen(verdict.word, verdict.code, verdict.summary, loaded=verdict.loaded))
    assert a.passed and a.line().endswith("(it lists its model: loaded)"), a.line()
