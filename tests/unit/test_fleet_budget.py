"""The fleet restart budget's pure part (check_vllm.restart.fleet): the rule, the limit, Prometheus's answer read,
and the handler's --fleet-* options (issue 55, point 2)."""

from __future__ import annotations

import argparse

import pytest

from check_vllm.cli.args import UsageError
from check_vllm.restart.fleet import Budget, Limit, group, limit, queries, rule, scalar, unasked
from check_vllm.restart.options import parse
from check_vllm.restart.policy import Decision

DUE = Decision(True, "verdict 'stuck' (no progress) 5 s old, service CRITICAL HARD", "restart")


def budget(most: str = "2", unasked_: str = "restart") -> Budget:
    return Budget("http://prometheus:9090", "gpu-a", limit(most), unasked_)


@pytest.mark.parametrize("busy, size, most, act", [
    (1, 8, "2", True), (2, 8, "2", True), (3, 8, "2", False), (5, 8, "2", False),
    (0, 8, "1", True),  # this server not scraped yet: it counts as one
    (2, 8, "25%", True), (3, 8, "25%", False),  # 25% of 8 is 2
    (1, 3, "25%", True), (2, 3, "25%", False),  # a small group's share is never below 1
    (4, 4, "100%", True),
])
def test_the_rule_holds_above_the_budget_and_keeps_the_restart_within_it(busy, size, most, act):
    d = rule(budget(most), busy, size, DUE)
    assert d.act is act, d.why
    assert d.why.startswith(DUE.why)  # the proof it acts on stays on the line
    assert f"{max(busy, 1)} of {size} servers of group gpu-a are proven stuck or starting" in d.why, d.why
    assert d.kind == ("restart" if act else "refuse")
    assert ("not restarting, a person decides" in d.why) is not act


def test_the_hold_line_says_why():
    d = rule(budget("2"), 5, 8, DUE)
    assert d.why.endswith("but fleet budget: 5 of 8 servers of group gpu-a are proven stuck or starting "
                          "(at most 2 at once): not restarting, a person decides"), d.why
    assert "(at most 2 at once, 25% of 8)" in rule(budget("25%"), 5, 8, DUE).why


def test_unasked_is_the_operators_choice_and_said_either_way():
    go = unasked(budget(), "connection refused", DUE)
    assert go.act and go.kind == "restart" and "the fleet was not asked (connection refused): restarting" in go.why
    hold = unasked(budget(unasked_="hold"), "connection refused", DUE)
    assert not hold.act and hold.kind == "refuse"
    assert "the fleet was not asked (connection refused): holding (--fleet-unasked hold)" in hold.why


@pytest.mark.parametrize("text, want", [("1", Limit(servers=1)), ("12", Limit(servers=12)),
                                        ("25%", Limit(share=0.25)), (" 100% ", Limit(share=1.0))])
def test_limit_parses_a_count_or_a_share(text, want):
    assert limit(text) == want


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "0%", "101%", "nan%", "inf%", "", "two", "%"])
def test_limit_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        limit(text)


@pytest.mark.parametrize("text", ["", 'a"b', "a b", "a\\b", "x" * 101, "a}b"])
def test_a_group_name_needs_no_quoting_in_the_query(text):
    with pytest.raises(argparse.ArgumentTypeError):
        group(text)


def test_the_queries_select_the_group_by_its_label():
    size, busy = queries("gpu-a")
    assert size == 'count(check_vllm_agent_up{group="gpu-a"})'
    assert 'check_vllm_restartable{group="gpu-a"} == 1' in busy and 'word="starting"' in busy
    assert busy.endswith("or vector(0)")  # none stuck is 0, not "no data"


def vector(value: object) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.5, value]}]}}


@pytest.mark.parametrize("doc, want", [
    (vector("5"), 5), (vector("0"), 0),
    (vector("NaN"), None), (vector("-1"), None), (vector("1.5"), None), (vector(5), 5), (vector(None), None),
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, None),  # no data
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, None),
    ({"status": "success", "data": {"resultType": "scalar", "result": [1.5, "5"]}}, None),
    (None, None), ([], None), ({"status": "success"}, None),
])
def test_scalar_reads_one_number_or_none(doc, want):
    assert scalar(doc) == want


BASE = ["--state", "CRITICAL", "--state-type", "HARD", "--url", "http://127.0.0.1:8000"]


def test_the_options_make_a_budget_only_all_together():
    args, _, _ = parse([*BASE, "--fleet-prometheus", "http://p:9090", "--fleet-group", "gpu-a", "--fleet-max",
                        "25%", "--", "true"])
    assert (args.fleet_max, args.fleet_unasked, args.fleet_timeout) == (Limit(share=0.25), "restart", 3.0)
    args, _, _ = parse([*BASE, "--", "true"])
    assert args.fleet_prometheus is None  # off by default
    for half in (["--fleet-group", "gpu-a"], ["--fleet-prometheus", "http://p:9090", "--fleet-group", "gpu-a"]):
        with pytest.raises(UsageError, match="needs --fleet-prometheus, --fleet-group and --fleet-max together"):
            parse([*BASE, *half, "--", "true"])
    with pytest.raises(UsageError, match="--fleet-prometheus must look like"):
        parse([*BASE, "--fleet-prometheus", "p:9090", "--fleet-group", "g", "--fleet-max", "1", "--", "true"])
    with pytest.raises(UsageError, match="--fleet-unasked"):
        parse([*BASE, "--fleet-unasked", "maybe", "--", "true"])
