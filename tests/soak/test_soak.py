"""Issue 21: the soak on real parts, judged window by window (the run itself: conftest.py's `soaked`).

Each test asserts one family of the report's `problems` empty; the report (printed at the end and written
to $SOAK_REPORT_DIR) holds the figures behind each.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.soak


def _windows(result, kind):
    return [w for w in result["windows"] if w["kind"] == kind]


def test_the_run_went_through_every_fault(soaked):
    _, result = soaked
    assert result["problems"] == [], result["problems"]
    assert result["checks"] > 0 and len(_windows(result, "fault")) == 5


def test_normal_windows_no_critical_no_restart_no_unnamed_warning(soaked):
    _, result = soaked
    normal = _windows(result, "normal") + _windows(result, "after")
    assert normal and all(w["checks"] > 0 for w in normal), [(w["name"], w["checks"]) for w in normal]
    problems = [(w["name"], p) for w in normal for p in w["problems"]]
    assert problems == [], problems
    assert result["false_criticals"] == 0


@pytest.mark.parametrize("kind", ["short_stop", "long_stop", "kill", "operator", "slow_metrics"])
def test_each_fault_its_verdicts_and_exactly_its_restarts_then_ok(soaked, kind):
    _, result = soaked
    [w] = [w for w in _windows(result, "fault") if w["fault"] == kind] or [None]
    assert w is not None, f"{kind} did not run"
    assert w["problems"] == [], (w["sequence"], w["problems"])
    assert w["handler_restarts"] == w["expected_restarts"], w
    assert w["to_ok"] is not None and w["first_ok_output"], w


def test_inference_only_on_idle_verdicts_counted_at_the_server(soaked):
    _, result = soaked
    p = result["probes"]
    assert p["problems"] == [], p
    assert p["sent_while_busy"] == 0 and p["stray"] == 0
    # a probe goes only with an idle reading: an idle verdict, or one whose text names the probe (restarted)
    assert p["counted_at_server"] > 0 and p["probing_checks"] <= p["idle_readings"], p


def test_perfdata_tokens_per_second_against_the_server_counters(soaked):
    _, result = soaked
    t = result["tokens"]
    assert t["intervals"] >= 5, t
    assert t["problems"] == [], t


def test_perfdata_running_waiting_against_the_server_and_the_load(soaked):
    _, result = soaked
    g = result["gauges"]
    assert g["results"] >= 5, g
    assert g["problems"] == [], g


def test_generated_tokens_against_the_load_generators_count(soaked):
    _, result = soaked
    lt = result["load_tokens"]
    assert lt["spans"] >= 3, lt
    assert lt["problems"] == [], lt
