"""The fleet restart budget kept by the liveness probe (issue 55, point 2): a failing liveness is a restart (the
kubelet's, Docker's restarter's), so it asks the fleet first (check_vllm.restart.fleet_probe; the pass or fail is
check_vllm.probes.answers.budgeted) within what -t leaves, and readiness never asks. Its options are the handler's,
defined once (check_vllm.restart.fleet_options). Pure: the question to Prometheus is a stand-in that answers
through the handler's own rule (check_vllm.restart.fleet.rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from check_vllm.cli.args import Deadline, UsageError
from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from check_vllm.nagios import cli, probe
from check_vllm.probes.answers import LINE_CAP, LIVENESS, READINESS, STARTUP, Seen, answer, budgeted, restarts
from check_vllm.restart import fleet_options, fleet_probe
from check_vllm.restart.fleet import Budget, limit, rule, unasked
from check_vllm.restart.policy import Decision

STUCK = Seen("stuck", CRITICAL, "stuck: no progress for 131 s over 2 readings; 2 running, 2 waiting")
PROOF = "CRITICAL stuck: no progress for 131 s over 2 readings; 2 running, 2 waiting"
BUDGET = Budget("http://prometheus:9090", "gpu-a", limit("2"))
NOW = 1000.0
ENDS = NOW + 9  # -t 9 started just now


def clock() -> float:
    return NOW


def counts(busy: int, size: int) -> tuple[fleet_probe.Ask, list[Budget]]:
    """The question answered: `busy` of `size` servers of the group proven stuck or starting; each budget it was
    asked with is kept."""
    asked: list[Budget] = []

    def ask(budget: Budget, restart: Decision) -> Decision:
        asked.append(budget)
        return rule(budget, busy, size, restart)
    return ask, asked


def test_over_the_budget_liveness_passes_and_says_why():
    ask, asked = counts(3, 4)
    a = fleet_probe.kept(answer(LIVENESS, STUCK), BUDGET, ENDS, ask, clock)
    assert a.code == 0, a
    assert a.line() == (f"liveness pass in spite of: {PROOF}, but fleet budget: 3 of 4 servers of group gpu-a are "
                        "proven stuck or starting (at most 2 at once): not restarting, a person decides")
    assert len(asked) == 1


def test_within_the_budget_liveness_fails_with_the_count():
    ask, _ = counts(2, 4)
    a = fleet_probe.kept(answer(LIVENESS, STUCK), BUDGET, ENDS, ask, clock)
    assert a.code == 1, a
    assert a.line() == (f"liveness fail: {PROOF}; fleet budget: 2 of 4 servers of group gpu-a are proven stuck or "
                        "starting (at most 2 at once)")


def test_readiness_and_startup_still_fail_and_never_ask():
    ask, asked = counts(3, 4)
    for kind in (READINESS, STARTUP):
        a = answer(kind, STUCK)
        assert not a.passed and fleet_probe.kept(a, BUDGET, ENDS, ask, clock) == a
    assert asked == []


@pytest.mark.parametrize("seen", [Seen("busy", OK, "busy: 2 running"), Seen("stalling", WARNING, "stalling: 9 s"),
                                  Seen(fault="state not saved")])
def test_a_passing_liveness_never_asks(seen):
    ask, asked = counts(0, 4)
    a = answer(LIVENESS, seen)
    assert a.passed and fleet_probe.kept(a, BUDGET, ENDS, ask, clock) == a
    assert asked == []


@pytest.mark.parametrize(("unasked", "passed"), [("restart", False), ("hold", True)])
def test_no_time_left_in_t_is_not_asked_and_the_operator_decides(unasked, passed):
    ask, asked = counts(0, 4)
    a = fleet_probe.kept(answer(LIVENESS, STUCK), BUDGET._replace(unasked=unasked),
                         NOW + fleet_probe.MARGIN + fleet_probe.LEAST / 2, ask, clock)
    assert asked == [] and a.passed is passed, a
    assert f"the fleet was not asked (no time left in -t for --fleet-timeout 3): {'holding' if passed else 'restarting'}" \
        f" (--fleet-unasked {unasked})" in a.why, a.why


def test_the_question_gets_at_most_what_t_leaves():
    ask, asked = counts(1, 4)
    fleet_probe.kept(answer(LIVENESS, STUCK), BUDGET, NOW + 2.0, ask, clock)
    fleet_probe.kept(answer(LIVENESS, STUCK), BUDGET, NOW + 60.0, ask, clock)
    assert asked[0].timeout == pytest.approx(2.0 - fleet_probe.MARGIN)
    assert asked[1].timeout == BUDGET.timeout


@pytest.mark.parametrize(("unasked", "passed"), [("restart", False), ("hold", True)])
def test_t_ending_while_asking_is_not_asked(unasked, passed):
    def ask(budget: Budget, restart: Decision) -> Decision:
        raise Deadline("timed out after 9 s")

    a = fleet_probe.kept(answer(LIVENESS, STUCK), BUDGET._replace(unasked=unasked), ENDS, ask, clock)
    assert a.passed is passed and "the fleet was not asked (-t ended while Prometheus was asked)" in a.why, a


def test_the_budgets_word_fits_on_the_line_whatever_the_proof():
    ask, _ = counts(3, 4)
    long = Seen("stuck", CRITICAL, "stuck: " + "no progress " * 60)
    line = fleet_probe.kept(answer(LIVENESS, long), BUDGET, ENDS, ask, clock).line()
    assert len(line) <= LINE_CAP and line.endswith("(at most 2 at once): not restarting, a person decides"), line
    assert line.startswith("liveness pass in spite of: CRITICAL stuck: no progress no progress"), line

    def slow(budget: Budget, restart: Decision) -> Decision:
        return unasked(budget, "Prometheus at http://prometheus:9090: GET /api/v1/query?query=" + "%28" * 30
                       + " timed out after 3.0 s", restart)
    line = fleet_probe.kept(answer(LIVENESS, long), BUDGET, ENDS, slow, clock).line()
    assert len(line) <= LINE_CAP and line.endswith(": restarting (--fleet-unasked restart)"), line


def test_budgeted_changes_only_a_failing_liveness():
    fail = answer(LIVENESS, STUCK)
    assert restarts(fail)
    held = budgeted(fail, False, "proof, but held", "proof")
    assert (held.passed, held.in_spite, held.why) == (True, True, "proof, but held")
    kept = budgeted(fail, True, "proof; within")
    assert (kept.passed, kept.why) == (False, "proof; within")
    for other in (answer(READINESS, STUCK), answer(STARTUP, STUCK), answer(LIVENESS, Seen("busy", OK, "busy"))):
        assert not restarts(other) and budgeted(other, False, "held") == other


FLEET = ("--fleet-prometheus", "http://127.0.0.1:9090/", "--fleet-group", "gpu-a", "--fleet-max", "25%")


def parsed(*argv: str):
    args = cli.parser().parse_args(list(argv))
    cli._validate(args)
    return args


def test_the_checks_liveness_probe_takes_the_budget_and_keeps_its_time():
    args = parsed("--probe", "liveness", *FLEET)
    assert fleet_options.budget_of(args) == Budget("http://127.0.0.1:9090", "gpu-a", limit("25%"), "restart", 3.0)
    assert probe.keeps(args) == 3.0  # the run's deadline comes 3 s sooner: the question fits in -t
    assert probe.keeps(parsed("--probe", "liveness", *FLEET, "--fleet-timeout", "1.5")) == 1.5
    assert probe.keeps(parsed("--probe", "readiness", *FLEET)) == 0  # readiness never asks
    assert probe.keeps(parsed(*FLEET)) == 0  # nor the Nagios check
    assert probe.keeps(parsed("--probe", "liveness")) == 0


@pytest.mark.parametrize("given", [FLEET[:2], FLEET[2:], FLEET[:4]])
def test_half_a_budget_is_a_usage_error(given):
    with pytest.raises(UsageError, match="needs --fleet-prometheus, --fleet-group and --fleet-max together"):
        fleet_options.budget_of(parsed("--probe", "liveness", *given))


def test_t_must_hold_the_question():
    with pytest.raises(UsageError, match=r"--timeout 4 must be at least --fleet-timeout 3 \+ 2 seconds"):
        parsed("--probe", "liveness", "-t", "4", *FLEET)
    parsed("--probe", "liveness", "-t", "4", *FLEET, "--fleet-timeout", "2")
    parsed("--probe", "readiness", "-t", "4", *FLEET)


def _actions(parser) -> dict:
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings
            and a.option_strings[0] in fleet_options.FLAGS}


def test_the_handler_and_the_probe_take_each_budget_option_alike():
    """One definition of each option's type, default, choices and name (check_vllm.restart.fleet_options): the
    handler's five, until its options.py adds them from there, are held to it."""
    from check_vllm.restart.options import parser as handler_parser

    handler, check = _actions(handler_parser()), _actions(cli.parser())
    assert set(handler) == set(check) == set(fleet_options.FLAGS)
    for flag in fleet_options.FLAGS:
        h, c = handler[flag], check[flag]
        assert (h.default, h.choices, h.metavar) == (c.default, c.choices, c.metavar), flag
        for text in ("2", "25%", "0.05", "0.1", "gpu-a", "bad group!", "http://x:1"):
            assert _typed(h.type, text) == _typed(c.type, text), (flag, text)


def _typed(kind, text: str) -> object:
    if kind is None:
        return text
    try:
        return kind(text)
    except Exception as err:  # noqa: BLE001 - the refusal is what is compared
        return type(err).__name__


def test_the_deployments_liveness_with_a_budget_is_one_the_check_accepts_within_its_time():
    """contrib/kubernetes/README.md's example: the check takes its command line, -t fits timeoutSeconds, and the
    question and the idle completion both fit in -t."""
    text = (Path(__file__).resolve().parents[2] / "contrib" / "kubernetes" / "README.md").read_text()
    section = text.split("## The fleet restart budget", 1)[1]
    probe_ = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))["livenessProbe"]
    argv = probe_["exec"]["command"]
    assert argv[:3] == ["check_vllm", "--probe", "liveness"]
    args = parsed(*argv[1:])
    assert fleet_options.budget_of(args) is not None
    assert args.timeout <= probe_["timeoutSeconds"] - 1
    assert args.idle_completion_timeout + args.fleet_timeout + 2 < args.timeout


@pytest.mark.parametrize(("argv", "has"), [
    (None, True), (["--probe", "liveness", *FLEET], True), (["--probe", "liveness", "--fleet-prom", "http://p:9"], True),
    (["-h"], True), (["-vh"], True), (["--he"], True),
    (["--probe", "liveness", "-u", "http://127.0.0.1:8000", "--reuse-verdict", "5", "-t", "9"], False),
])
def test_the_budget_options_are_made_only_where_the_command_line_may_name_them(argv, has):
    """A reused verdict's run (no --fleet-*) does not build them: their definitions import dataclasses."""
    assert ("--fleet-prometheus" in _actions(cli.parser(argv))) is has


def test_a_command_line_without_the_budget_parses_as_before():
    args = cli.parser(["--probe", "liveness", "-t", "4"]).parse_args(["--probe", "liveness", "-t", "4"])
    cli._validate(args)
    assert probe.keeps(args) == 0
