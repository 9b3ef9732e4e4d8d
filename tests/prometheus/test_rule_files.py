"""Each shipped Prometheus rule file through the real promtool (Debian's prometheus package), one table row each:

    bash .ci/prometheus-deps.sh && python -m pytest -m prometheus tests/prometheus -q

- contrib/prometheus/vllm-rules.yml: re-derives "stuck" in PromQL from vLLM's own counters (no agent needed);
  its unit tests' input series are copied from the real vLLM pages in tests/fixtures/real/ (test_rules.py).
- contrib/prometheus/check-vllm-agent-rules.yml: alerts on the agent's verdict series (test_agent_rules.py checks
  they name only what the agent serves).

`promtool check rules` validates each file; `promtool test rules` runs its unit tests beside this module. Two
deliberately broken variants (a wrong expectation, a slower rule) must make promtool fail, so the unit tests can
fail. Nothing skips: without promtool the tests FAIL with the installer's output."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from .conftest import REPO, run

pytestmark = pytest.mark.prometheus

HERE = Path(__file__).resolve().parent


class RuleFile(NamedTuple):
    rules: Path
    unit: Path
    alerts: tuple[str, ...]
    cases: tuple[str, ...]  # the unit tests' names start with these
    marker: str  # an eval_time line of the unit tests, moved to `moved` to make an expectation wrong
    moved: str
    wrong: str  # what promtool then reports
    fors: int  # `for: 1m` lines, each made 5m to make the rules slower
    missed: tuple[str, ...]  # what promtool then reports missed


FILES = {
    "vllm-rules": RuleFile(
        REPO / "contrib" / "prometheus" / "vllm-rules.yml", HERE / "vllm-rules.test.yml",
        ("VLLMStuck", "VLLMDown", "VLLMRestarted", "VLLMQueueGrowing"),
        ("busy", "frozen with work", "idle", "down", "restart", "queue growth", "one frozen engine"),
        "- eval_time: 3m   # the window has just lost the last progress", "4m", "VLLMStuck, time: 4m", 3,
        ("alertname: VLLMStuck, time: 4m", "alertname: VLLMDown, time: 3m")),
    "agent-rules": RuleFile(
        REPO / "contrib" / "prometheus" / "check-vllm-agent-rules.yml", HERE / "check-vllm-agent-rules.test.yml",
        ("CheckVLLMProvenFault", "CheckVLLMStalling", "CheckVLLMCannotJudge", "CheckVLLMAgentStale",
         "CheckVLLMAgentDown"),
        ("busy", "frozen", "down", "unresponsive", "a stale agent", "an agent not scraped", "unreachable"),
        "- eval_time: 1m15s   # pending: the stall is 45 s old", "2m15s", "CheckVLLMStalling, time: 2m15s", 3,
        tuple(f"alertname: {a}, time: 2m," for a in ("CheckVLLMStalling", "CheckVLLMAgentStale",
                                                      "CheckVLLMAgentDown"))),
}
each = pytest.mark.parametrize("f", FILES.values(), ids=FILES.keys())


@each
def test_promtool_checks_the_rules(promtool, f: RuleFile):
    out = run(promtool, "check", "rules", f.rules)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(f.alerts)} rules found" in out.stdout, out.stdout
    assert re.findall(r"^\s+- alert: (\w+)$", f.rules.read_text(), re.M) == list(f.alerts)


@each
def test_promtool_runs_the_unit_tests_and_they_pass(promtool, f: RuleFile):
    out = run(promtool, "test", "rules", f.unit)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "FAILED" not in out.stdout, out.stdout
    text = f.unit.read_text()
    names = re.findall(r"^  - name: (.+)$", text, re.M)
    for case in f.cases:
        assert any(n.startswith(case) for n in names), (case, names)
    for alert in f.alerts:  # every alert is shown to fire somewhere, not only to stay silent
        fired = re.search(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels:", text)
        assert fired, f"no unit test expects {alert} to fire"


def _variant(tmp_path: Path, f: RuleFile, rules: str | None = None, unit: str | None = None) -> Path:
    """A copy of the unit tests (optionally of the rules too) in tmp_path, the rule file path made absolute."""
    rules_path = f.rules
    if rules is not None:
        rules_path = tmp_path / f.rules.name
        rules_path.write_text(rules)
    text = unit if unit is not None else f.unit.read_text()
    shipped = f"../../contrib/prometheus/{f.rules.name}"
    assert shipped in text
    path = tmp_path / f.unit.name
    path.write_text(text.replace(shipped, str(rules_path)))
    return path


@each
def test_a_wrong_expectation_fails(promtool, tmp_path, f: RuleFile):
    """An expectation moved to a time its alert has left the state it names: promtool must fail, showing it."""
    text = f.unit.read_text()
    assert text.count(f.marker) == 1
    stamp = f.marker.split()[2]
    wrong = text.replace(f.marker, f.marker.replace(stamp, f.moved, 1))
    out = run(promtool, "test", "rules", _variant(tmp_path, f, unit=wrong))
    assert out.returncode != 0, out.stdout
    report = out.stdout + out.stderr
    alert = f.wrong.split(",")[0]
    assert "FAILED" in report and f"alertname: {f.wrong}" in report, report
    assert re.search(rf"exp:\[\],\s+got:\[\s+0:\s+Labels:\{{alertname=\"{alert}\"", report), report


@each
def test_a_slower_rule_fails_the_unit_tests(promtool, tmp_path, f: RuleFile):
    """`for: 5m` instead of 1m: the expectations at their times are then missed."""
    rules = f.rules.read_text()
    assert rules.count("for: 1m\n") == f.fors
    out = run(promtool, "test", "rules", _variant(tmp_path, f, rules=rules.replace("for: 1m\n", "for: 5m\n")))
    assert out.returncode != 0, out.stdout
    report = out.stdout + out.stderr
    for missed in f.missed:
        assert missed in report, (missed, report)
    assert re.search(r"got:\[\]", report), report
