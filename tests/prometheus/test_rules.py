"""contrib/prometheus/vllm-rules.yml through the real promtool (Debian's prometheus package).

    bash .ci/prometheus-deps.sh && python -m pytest -m fleet tests/prometheus -q

`promtool check rules` validates the file; `promtool test rules` runs tests/prometheus/vllm-rules.test.yml,
whose input series are copied from the real vLLM pages in tests/fixtures/real/. Two deliberately broken
variants (a wrong expectation, a slower rule) must make promtool fail, so the unit tests can fail. Nothing
skips: without promtool the tests FAIL with the installer's output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import REPO, run

pytestmark = pytest.mark.prometheus

RULES = REPO / "contrib" / "prometheus" / "vllm-rules.yml"
UNIT = Path(__file__).resolve().parent / "vllm-rules.test.yml"
PAGES = REPO / "tests" / "fixtures" / "real"
ALERTS = ("VLLMStuck", "VLLMDown", "VLLMRestarted", "VLLMQueueGrowing")


def test_promtool_checks_the_rules(promtool):
    out = run(promtool, "check", "rules", RULES)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in out.stdout, out.stdout
    text = RULES.read_text()
    assert [m for m in re.findall(r"^\s+- alert: (\w+)$", text, re.M)] == list(ALERTS)


def test_promtool_runs_the_unit_tests_and_they_pass(promtool):
    out = run(promtool, "test", "rules", UNIT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "FAILED" not in out.stdout, out.stdout
    names = re.findall(r"^  - name: (.+)$", UNIT.read_text(), re.M)
    for case in ("busy", "frozen with work", "idle", "down", "restart", "queue growth", "one frozen engine"):
        assert any(n.startswith(case) for n in names), (case, names)
    for alert in ALERTS:  # every alert is shown to fire somewhere, not only to stay silent
        fired = re.search(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels:", UNIT.read_text())
        assert fired, f"no unit test expects {alert} to fire"


def _variant(tmp_path: Path, rules: str | None = None, unit: str | None = None) -> Path:
    """A copy of the unit tests (optionally of the rules too) in tmp_path, the rule file path made absolute."""
    rules_path = RULES
    if rules is not None:
        rules_path = tmp_path / "vllm-rules.yml"
        rules_path.write_text(rules)
    text = (unit if unit is not None else UNIT.read_text())
    assert "../../contrib/prometheus/vllm-rules.yml" in text
    path = tmp_path / "vllm-rules.test.yml"
    path.write_text(text.replace("../../contrib/prometheus/vllm-rules.yml", str(rules_path)))
    return path


def test_a_wrong_expectation_fails(promtool, tmp_path):
    """Claim the frozen engine is still quiet at 4 minutes: promtool must fail and show the alert it got."""
    marker = "- eval_time: 3m   # the window has just lost the last progress"
    text = UNIT.read_text()
    assert text.count(marker) == 1
    out = run(promtool, "test", "rules", _variant(tmp_path, unit=text.replace(marker, marker.replace("3m", "4m"))))
    assert out.returncode != 0, out.stdout
    report = out.stdout + out.stderr
    assert "FAILED" in report and "alertname: VLLMStuck, time: 4m" in report, report
    assert re.search(r"exp:\[\],\s+got:\[\s+0:\s+Labels:\{alertname=\"VLLMStuck\"", report), report


def test_a_slower_rule_fails_the_unit_tests(promtool, tmp_path):
    """`for: 5m` instead of 1m: the stuck and down expectations at their times are then missed."""
    rules = RULES.read_text()
    assert rules.count("for: 1m") == 3
    out = run(promtool, "test", "rules", _variant(tmp_path, rules=rules.replace("for: 1m", "for: 5m")))
    assert out.returncode != 0, out.stdout
    report = out.stdout + out.stderr
    assert "alertname: VLLMStuck, time: 4m" in report and "alertname: VLLMDown, time: 3m" in report, report
    assert re.search(r"got:\[\]", report), report


# The values the unit tests feed in, and the real page each one is copied from.
FROM_PAGES = [
    ("saturated.txt", "vllm:iteration_tokens_total_count", "993"),
    ("saturated_b.txt", "vllm:iteration_tokens_total_count", "2608"),
    ("frozen_a.txt", "vllm:iteration_tokens_total_count", "2609"),
    ("frozen_b.txt", "vllm:iteration_tokens_total_count", "2609"),
    ("idle.txt", "vllm:iteration_tokens_total_count", "1"),
    ("restarted.txt", "vllm:iteration_tokens_total_count", "0"),
    ("saturated.txt", "vllm:generation_tokens_total", "1984"),
    ("saturated_b.txt", "vllm:generation_tokens_total", "5214"),
    ("frozen_a.txt", "vllm:generation_tokens_total", "5216"),
    ("saturated.txt", "vllm:prompt_tokens_total", "52"),
    ("saturated_b.txt", "vllm:prompt_tokens_total", "102"),
    ("idle.txt", "vllm:prompt_tokens_total", "2"),
    ("saturated.txt", "vllm:num_requests_running", "2"),
    ("saturated.txt", "vllm:num_requests_waiting", "3"),
    ("frozen_b.txt", "vllm:num_requests_waiting", "3"),
    ("idle.txt", "vllm:num_requests_running", "0"),
    ("saturated.txt", "vllm:kv_cache_usage_perc", "0.003907203907203893"),
    ("saturated_b.txt", "vllm:kv_cache_usage_perc", "0.0024420024420024333"),
    ("frozen_a.txt", "vllm:kv_cache_usage_perc", "0.0024420024420024333"),
    ("saturated.txt", "process_start_time_seconds", "1.79601624842e+09"),
    ("restarted.txt", "process_start_time_seconds", "1.79601627907e+09"),
]


def _sample(page: str, name: str) -> float:
    text = (PAGES / page).read_text()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not on {page}")


@pytest.mark.parametrize(("page", "name", "value"), FROM_PAGES)
def test_the_unit_test_values_are_the_real_pages_values(page, name, value):
    assert _sample(page, name) == float(value)
    unit = UNIT.read_text()
    lines = unit.splitlines()
    values = " ".join(lines[i + 1] for i, ln in enumerate(lines) if ln.strip().startswith(f"- series: '{name}{{"))
    assert re.search(rf"(?<![\d.]){re.escape(value)}(?![\d.e])", values), f"{value} ({page}) unused for {name}"
    assert page in unit
