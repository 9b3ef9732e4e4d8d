"""nagiosplugin glue: the Resource measures, Contexts judge, the Summary words the status line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import nagiosplugin
from nagiosplugin.performance import Performance

from check_vllm.cli import statusline
from check_vllm.contract.engines import BY_KEY, VLLM
from check_vllm.contract.numbers import finite
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CRITICAL, OK, PERFDATA, UNKNOWN, WARNING
from check_vllm.session import Outcome, Run, session

_STATES = {OK: nagiosplugin.Ok, WARNING: nagiosplugin.Warn, CRITICAL: nagiosplugin.Critical,
           UNKNOWN: nagiosplugin.Unknown}

def perf_number(value: float | None) -> str:
    """Perfdata values per the plugin guidelines: plain decimals or U, never nan/inf/exponents."""
    value = finite(value)
    if value is None:
        return "U"
    if value.is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:.1f}"


def _unit(metric: nagiosplugin.Metric) -> str:
    return metric.uom if metric.value is not None else ""  # "U", never "U%"


class Server(nagiosplugin.Resource):
    """One run of the check (check_vllm.session) as nagiosplugin's Resource: the verdict and its perfdata."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.outcome: Outcome | None = None
        self.check: nagiosplugin.Check | None = None  # set by build(): the status line names the engine

    @property
    def name(self) -> str:
        return BY_KEY[self.outcome.engine].label if self.outcome is not None else VLLM.label

    @property
    def save_failed(self) -> bool:
        return bool(self.outcome and self.outcome.unsaved)

    def probe(self) -> Iterator[nagiosplugin.Metric]:
        outcome = self.outcome = session(self.run)
        if self.check is not None:
            self.check.name = self.name
        if outcome.error is not None:
            raise outcome.error
        if outcome.verdict is None:  # the state lock held past its wait, a state directory refused
            raise nagiosplugin.CheckError(outcome.fault)
        verdict = outcome.verdict
        yield nagiosplugin.Metric("verdict", verdict, context="verdict")
        for perf in PERFDATA:
            value = getattr(verdict, perf.attr)
            if perf.attr == "probe_seconds" and value is None:
                continue
            yield nagiosplugin.Metric(perf.label, value, perf.unit, min=0, max=100 if perf.unit == "%" else None,
                                      context=perf.label if perf.ranges else "perf")
        yield nagiosplugin.Metric("state_file", "; ".join(filter(None, (outcome.note, outcome.unsaved))),
                                  context="state_file")


class VerdictContext(nagiosplugin.Context):
    def __init__(self) -> None:
        super().__init__("verdict")

    def evaluate(self, metric: nagiosplugin.Metric, resource: Any) -> nagiosplugin.Result:
        verdict: Verdict = metric.value
        return nagiosplugin.Result(_STATES[verdict.code], verdict.summary, metric)


class PerfContext(nagiosplugin.Context):
    """Perfdata only; the value is written by `number`, not by str()."""

    def __init__(self, name: str = "perf") -> None:
        super().__init__(name)

    def evaluate(self, metric: nagiosplugin.Metric, resource: Any) -> nagiosplugin.Result:
        return nagiosplugin.Result(nagiosplugin.Ok, None, metric)

    def performance(self, metric: nagiosplugin.Metric, resource: Any) -> Performance:
        return Performance(metric.name, perf_number(metric.value), _unit(metric), min=metric.min, max=metric.max)


class ThresholdContext(nagiosplugin.ScalarContext):
    """-w/-c style ranges on a gauge that may be unknown (U) when the server gave no reading."""

    def evaluate(self, metric: nagiosplugin.Metric, resource: Any) -> nagiosplugin.Result:
        if metric.value is None:
            return nagiosplugin.Result(nagiosplugin.Ok, None, metric)
        for rng, state in ((self.critical, nagiosplugin.Critical), (self.warning, nagiosplugin.Warn)):
            if not rng.match(metric.value):
                return nagiosplugin.Result(state, f"{metric.name} {perf_number(metric.value)}{metric.uom} "
                                                  f"{rng.violation}", metric)
        return nagiosplugin.Result(nagiosplugin.Ok, None, metric)

    def performance(self, metric: nagiosplugin.Metric, resource: Any) -> Performance:
        return Performance(metric.name, perf_number(metric.value), _unit(metric), self.warning, self.critical,
                           metric.min, metric.max)


class StateFileContext(nagiosplugin.Context):
    """A state that cannot be saved blinds the next run: worth a WARNING, never more."""

    def __init__(self) -> None:
        super().__init__("state_file")

    def evaluate(self, metric: nagiosplugin.Metric, resource: Any) -> nagiosplugin.Result:
        state = nagiosplugin.Warn if getattr(resource, "save_failed", False) else nagiosplugin.Ok
        return nagiosplugin.Result(state, metric.value or None, metric)


#: Long output (-v) names at most this many engines.
VERBOSE_ENGINES = 64


class VerdictSummary(nagiosplugin.Summary):
    """The verdict word always leads; threshold breaches and state-file notes follow.

    Whatever the parts hold, the text comes out as one clean line that leaves the perfdata room
    (check_vllm.cli.statusline): this is the last place server-written text passes before stdout.
    """

    def __init__(self) -> None:
        self.check: nagiosplugin.Check | None = None  # set by build(): its perfdata shares the line

    def _fit(self, text: str) -> str:
        perfdata = " ".join(self.check.perfdata) if self.check is not None else ""
        name = self.check.name if self.check is not None else VLLM.label
        return statusline.fit(text, statusline.text_budget(f"{name} CRITICAL - ", f"| {perfdata}" if perfdata else ""))

    def _line(self, results: nagiosplugin.Results) -> str:
        head = results["verdict"].hint
        extra = [r.hint for r in results if r.metric and r.metric.name != "verdict" and r.hint]
        return self._fit("; ".join([head, *extra]))

    def ok(self, results: nagiosplugin.Results) -> str:
        return self._line(results)

    def problem(self, results: nagiosplugin.Results) -> str:
        if "verdict" not in results:  # a CheckError (e.g. the state lock) produced no verdict
            return self._fit("; ".join(r.hint for r in results if r.hint))
        return self._line(results)

    def verbose(self, results: nagiosplugin.Results) -> list[str]:
        if "verdict" not in results:
            return []
        verdict: Verdict = results["verdict"].metric.value
        named = sorted(verdict.engines.items())
        lines = [statusline.fit(f"engine {name or '(unlabelled)'}: {word}", 200) for name, word in named[:VERBOSE_ENGINES]]
        if len(named) > VERBOSE_ENGINES:
            lines.append(f"... and {len(named) - VERBOSE_ENGINES} more engines")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        return [*lines, f"checked at {stamp}"]


def build(run: Run, ranges: dict[str, str | None]) -> nagiosplugin.Check:
    """The check: `ranges` holds the value of each option a perfdata row names in its `ranges` (None: not given)."""
    summary = VerdictSummary()
    thresholds = [ThresholdContext(perf.label, *(ranges.get(flag) for flag in perf.ranges))
                  for perf in PERFDATA if perf.ranges]
    server = Server(run)
    check = nagiosplugin.Check(server, VerdictContext(), PerfContext(), StateFileContext(), *thresholds, summary)
    check.name = VLLM.label  # until the run says whose server it is
    summary.check = server.check = check
    return check
