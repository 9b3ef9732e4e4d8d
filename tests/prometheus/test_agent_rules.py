"""contrib/prometheus/check-vllm-agent-rules.yml through the real promtool (Debian's prometheus package).

    bash .ci/prometheus-deps.sh && python -m pytest -m prometheus tests/prometheus -q

`promtool check rules` validates the file; `promtool test rules` runs tests/prometheus/check-vllm-agent-rules.test.yml.
Two deliberately broken variants (a wrong expectation, a slower rule) must make promtool fail. The series, labels and
words the rules and their tests name must be the agent's own (check_vllm.haproxy.exposition, the contract's words):
a rule on a name the agent never serves would never fire, and promtool cannot know.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.contract import vocab
from check_vllm.contract.kept import Memory
from check_vllm.contract.verdict import Verdict
from check_vllm.haproxy.exposition import IdleCompletion, Named, Scrape, render

from .conftest import REPO, run

pytestmark = pytest.mark.prometheus

RULES = REPO / "contrib" / "prometheus" / "check-vllm-agent-rules.yml"
UNIT = Path(__file__).resolve().parent / "check-vllm-agent-rules.test.yml"
ALERTS = ("CheckVLLMProvenFault", "CheckVLLMStalling", "CheckVLLMCannotJudge", "CheckVLLMAgentStale",
          "CheckVLLMAgentDown")


def test_promtool_checks_the_rules(promtool):
    out = run(promtool, "check", "rules", RULES)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in out.stdout, out.stdout
    assert re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.M) == list(ALERTS)


def test_promtool_runs_the_unit_tests_and_they_pass(promtool):
    out = run(promtool, "test", "rules", UNIT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "FAILED" not in out.stdout, out.stdout
    names = re.findall(r"^  - name: (.+)$", UNIT.read_text(), re.M)
    for case in ("busy", "frozen", "down", "unresponsive", "a stale agent", "an agent not scraped", "unreachable"):
        assert any(n.startswith(case) for n in names), (case, names)
    for alert in ALERTS:  # every alert is shown to fire somewhere, not only to stay silent
        fired = re.search(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels:", UNIT.read_text())
        assert fired, f"no unit test expects {alert} to fire"


def _variant(tmp_path: Path, rules: str | None = None, unit: str | None = None) -> Path:
    """A copy of the unit tests (optionally of the rules too) in tmp_path, the rule file path made absolute."""
    rules_path = RULES
    if rules is not None:
        rules_path = tmp_path / RULES.name
        rules_path.write_text(rules)
    text = unit if unit is not None else UNIT.read_text()
    shipped = f"../../contrib/prometheus/{RULES.name}"
    assert shipped in text
    path = tmp_path / UNIT.name
    path.write_text(text.replace(shipped, str(rules_path)))
    return path


def test_a_wrong_expectation_fails(promtool, tmp_path):
    """Claim the stall is still pending at 2m15s: promtool must fail and show the warning it got."""
    marker = "- eval_time: 1m15s   # pending: the stall is 45 s old"
    text = UNIT.read_text()
    assert text.count(marker) == 1
    wrong = text.replace(marker, marker.replace("1m15s", "2m15s"))
    out = run(promtool, "test", "rules", _variant(tmp_path, unit=wrong))
    assert out.returncode != 0, out.stdout
    report = out.stdout + out.stderr
    assert "FAILED" in report and "alertname: CheckVLLMStalling, time: 2m15s" in report, report
    assert re.search(r"exp:\[\],\s+got:\[\s+0:\s+Labels:\{alertname=\"CheckVLLMStalling\"", report), report


def test_a_slower_rule_fails_the_unit_tests(promtool, tmp_path):
    """`for: 5m` instead of 1m: the warning and both agent rules are then missed at their times."""
    rules = RULES.read_text()
    assert rules.count("for: 1m\n") == 3
    out = run(promtool, "test", "rules", _variant(tmp_path, rules=rules.replace("for: 1m\n", "for: 5m\n")))
    assert out.returncode != 0, out.stdout
    report = out.stdout + out.stderr
    for alert in ("CheckVLLMStalling", "CheckVLLMAgentStale", "CheckVLLMAgentDown"):
        assert f"alertname: {alert}, time: 2m," in report, (alert, report)
    assert re.search(r"got:\[\]", report), report


def _served() -> dict[str, set[str]]:
    """Every series the agent can serve -> its label names (Prometheus' job and instance added)."""
    full = Verdict(vocab.STUCK, vocab.CRITICAL, "", Memory(), running=1.0, waiting=1.0, kv_cache=1.0,
                   tokens_per_second=1.0, prompt_tokens_per_second=1.0, steps_per_second=1.0, stalled_seconds=1.0)
    page = render(Scrape("http://127.0.0.1:8000", full, Named("vllm", "m"), IdleCompletion(1.0, 1.0), 1.0, 1.0))[0]
    return {s.name: {*s.labels, "job", "instance"} for f in text_string_to_metric_families(page.decode())
            for s in f.samples}


def test_the_rules_name_only_what_the_agent_serves():
    served = _served()
    for path in (RULES, UNIT):
        text = path.read_text()
        names = set(re.findall(r"\b(check_vllm_[a-z_]+)\b", text)) - {"check_vllm_agent", "check_vllm_restart"}
        assert names and names <= set(served), (path.name, sorted(names - set(served)))
        for name, labels in re.findall(r"'(check_vllm_[a-z_]+)\{([^}]*)\}'", text):  # the unit tests' input series
            assert {kv.split("=", 1)[0] for kv in labels.split(",")} == served[name], (name, labels)
        words = {w for group in re.findall(r'word=~?"([^"]+)"', text) for w in group.split("|")}
        words |= set(re.findall(r"^\s+word: (.+)$", text, re.M))
        assert words and words <= set(vocab.WORDS), sorted(words - set(vocab.WORDS))
