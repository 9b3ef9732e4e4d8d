"""Every verdict's answer in every front end, one table (issue 52): for each word and state of the contract
(check_vllm.contract.vocab.VERDICTS), what each front end answers, each computed by that front end's own pure
function, never restated here:

- the check's exit code: the Nagios glue's verdict context (check_vllm.nagios.plugin.VerdictContext);
- the handler's decision on that verdict, saved fresh, the service CRITICAL HARD where it is CRITICAL
  (check_vllm.restart.policy.decide, by default and with --proxy);
- the HAProxy agent's reply and the rotation entry it words (check_vllm.haproxy.reply.reply_for);
- the orchestrator probes' liveness, readiness and startup (check_vllm.probes.answers), startup also with a
  reading this run, with the server's model list naming the model (Seen.loaded) and with the state file saying
  it served before;
- the handler and liveness over a fleet restart budget (issue 55): the handler's own rule
  (check_vllm.restart.fleet.rule) on a group over its budget, and the probe's answer to it
  (check_vllm.probes.answers.budgeted);
- the Netdata collector's vllm.state dimension (check_vllm.netdata.charts.collect) and the alarm the shipped
  health.d raises on it (check_vllm.netdata.alarms.raised).

Above every front end, so in tools/ (CONTRIBUTING: the front ends import nothing of each other). Pure: no I/O.
tools/update_readme.py writes the table into docs/frontends.md; tests/unit/test_frontends.py walks every row
against it and holds the invariants.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from nagiosplugin import Metric

from check_vllm.contract import rotation
from check_vllm.contract.kept import Memory, Remembered
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CODE_NAMES, VERDICTS
from check_vllm.haproxy.reply import Reply, reply_for
from check_vllm.nagios.plugin import VerdictContext
from check_vllm.netdata import alarms, charts
from check_vllm.netdata.config import Job
from check_vllm.probes.answers import Answer, Seen, budgeted, liveness, readiness, said, startup
from check_vllm.restart.fleet import Budget, limit, rule
from check_vllm.restart.policy import Decision, Event, Policy, decide

#: The time the verdict was saved and the handler called: a fresh verdict, no restart before it.
NOW = 1_000_000.0
#: What else a startup probe may see beside the verdict, as Seen's fields, and how the table names it.
STARTUP_ALSO: tuple[tuple[str, Callable[[Seen], Seen]], ...] = (
    ("read", lambda s: s._replace(reading=True)), ("its model listed", lambda s: s._replace(loaded=True)),
    ("it served before", lambda s: s._replace(served_before=True)))
#: A group over its fleet restart budget: 3 of its 4 servers proven stuck or starting, at most 2 at once.
OVER_BUDGET = (Budget("http://prometheus:9090", "gpu-a", limit("2")), 3, 4)
#: How a cell names a group over its fleet restart budget (docs/fleet.md).
OVER = "over the fleet budget"
#: The netdata level's name as Netdata's alarm status says it.
LEVELS = {alarms.WARN: "WARNING", alarms.CRIT: "CRITICAL"}


class Answers(NamedTuple):
    """One verdict (word, state) as every front end answers it."""

    word: str
    state: int
    exit: int
    handler: Decision
    handler_proxy: Decision
    #: The handler's decision, and liveness, when the group is over its fleet restart budget (OVER_BUDGET).
    handler_over: Decision
    liveness_over: Answer
    reply: Reply
    rotation: str
    liveness: Answer
    readiness: Answer
    #: Startup on the verdict alone, then under each of STARTUP_ALSO.
    startup: Answer
    startup_also: tuple[Answer, ...]
    dimension: str
    value: int
    #: (template, alarms.WARN or CRIT), None: no alarm.
    alarm: tuple[str, str] | None


def _exit(verdict: Verdict) -> int:
    return int(VerdictContext().evaluate(Metric("verdict", verdict, context="verdict"), None).state.code)


def _handler(word: str, state: int, proxy: bool) -> Decision:
    event = Event(CODE_NAMES[state], "HARD")
    return decide(event, Remembered(word, state, word, NOW), None, (), Policy(proxy=proxy), NOW)


def _netdata(verdict: Verdict) -> tuple[str, int]:
    values = charts.collect(Job("job", "http://127.0.0.1:8000"), verdict, None, (), None)["state"]
    on = [(dim, value) for dim, value in values.items() if value]
    if len(on) != 1:
        raise ValueError(f"vllm.state for {verdict.word!r} sets {on}, not one dimension")
    return on[0]


def _over_budget(decision: Decision) -> Decision:
    """A decision to restart as the fleet restart budget leaves it when the group is over it; else as it is."""
    budget, busy, size = OVER_BUDGET
    return rule(budget, busy, size, decision) if decision.act else decision


def answers(word: str, state: int) -> Answers:
    """Every front end's answer to the verdict `word` at `state`."""
    verdict = Verdict(word, state, "", Memory())
    seen = Seen(word, state, word)
    dimension, value = _netdata(verdict)
    handler, live = _handler(word, state, False), liveness(seen)
    asked = _over_budget(Decision(True, live.why, "restart"))
    return Answers(word, state, _exit(verdict), handler, _handler(word, state, True), _over_budget(handler),
                   budgeted(live, asked.act, asked.why), reply_for(word, state), rotation.rotation_for(word, state),
                   live, readiness(seen),
                   startup(seen), tuple(startup(more(seen)) for _, more in STARTUP_ALSO),
                   dimension, value, alarms.raised(dimension, value))


def walk() -> list[Answers]:
    """Every word at every state it can carry, in the contract's order."""
    return [answers(w.word, state) for w in VERDICTS for state in w.states]


def _probe(a: Answer) -> str:
    return "**fail**" if not a.passed else "pass, in spite of it" if a.in_spite else "pass"


def _startup(row: Answers) -> str:
    """Startup on the verdict alone; when it fails, what would pass it: the reason its line adds, else its name."""
    if row.startup.passed:
        return _probe(row.startup)
    base = said(Seen(row.word, row.state, row.word))
    unless = [a.why[len(base):].strip(" ()") or name for (name, _), a in zip(STARTUP_ALSO, row.startup_also,
              strict=True) if a.passed]
    return "**fail**" + (f"; pass if {' or '.join(unless)}" if unless else "")


def _handler_cell(row: Answers) -> str:
    def one(d: Decision) -> str:
        return f"**{d.kind}**" if d.act else f"{d.kind}: {d.why}"

    proxy, over = row.handler_proxy, row.handler_over
    return one(row.handler) + (f"; with `--proxy`: {one(proxy)}" if proxy.act != row.handler.act else "") \
        + (f"; {OVER}: {over.kind}" if over.act != row.handler.act else "")


def _liveness(row: Answers) -> str:
    over = row.liveness_over
    return _probe(row.liveness) + (f"; {OVER}: {_probe(over)}" if over.passed != row.liveness.passed else "")


def _reply(row: Answers) -> str:
    return f"`{row.reply.line().strip()}`"


def _alarm(row: Answers) -> str:
    return "none" if row.alarm is None else f"`{row.alarm[0]}` {LEVELS[row.alarm[1]]}"


#: Each column of the table: its front end (a package of check_vllm) and its cell.
COLUMNS: Mapping[str, tuple[str, Callable[[Answers], str]]] = MappingProxyType({
    "check exit": ("nagios", lambda r: f"{r.exit} {CODE_NAMES[r.exit]}"),
    "handler": ("restart", _handler_cell),
    "agent reply": ("haproxy", _reply),
    "rotation": ("haproxy", lambda r: r.rotation),
    "liveness": ("probes", _liveness),
    "readiness": ("probes", lambda r: _probe(r.readiness)),
    "startup": ("probes", _startup),
    "Netdata vllm.state": ("netdata", lambda r: f"`{r.dimension}` = {r.value}"),
    "Netdata alarm": ("netdata", _alarm),
})


def cells(row: Answers) -> dict[str, str]:
    return {column: cell(row) for column, (_, cell) in COLUMNS.items()}


def table() -> str:
    """The markdown table docs/frontends.md carries."""
    lines = ["| verdict | state | " + " | ".join(COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
    for row in walk():
        lines.append(f"| `{row.word}` | {CODE_NAMES[row.state]} | " + " | ".join(cells(row).values()) + " |")
    return "\n".join(lines) + "\n"


def parse(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """A table as table() writes it -> {(word, state name): {column: cell}} (the committed table, read back)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split(" | ")]
    out: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines[1:]:
        row = [c.strip() for c in line.strip().removeprefix("|").removesuffix("|").split(" | ")]
        out[(row[0].strip("`"), row[1])] = dict(zip(head[2:], row[2:], strict=False))  # a short row: its cells missing
    return out
