"""Regenerate what the docs carry from the code, so none of it drifts: the usage block of docs/usage.md from
`check_vllm --help`, the agent's in docs/haproxy-agent.md from `check_vllm_agent --help`, the README's
verdict table from the contract's table (check_vllm.contract.vocab.VERDICTS), docs/probes.md's probe table from
check_vllm.probes.answers, docs/how-it-decides.md's sample lines (from the golden table of
tests/e2e/test_golden.py) and exit-code table, docs/frontends.md's table of every verdict in every front end
(tools/frontends.py), the Netdata verdict alarms (contrib/netdata/health.d/vllm.conf and docs/netdata.md's table,
from check_vllm.netdata.alarms), and the README's reliability tables and docs/soak.md's tables of
the run from the report of one 60-minute soak (docs/soak-60min.json, written by `SOAK_MINUTES=60 tox -e soak`).

docs/usage.md's table of the options the front ends share comes from check_vllm.cli.option_table.

Run `python tools/update_readme.py`; tests/unit/test_readme.py fails when any of them is stale.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"
START, END = "<!-- usage:start -->", "<!-- usage:end -->"
AGENT = USAGE.parent / "haproxy-agent.md"
A_START, A_END = "<!-- agent-usage:start -->", "<!-- agent-usage:end -->"
README = USAGE.parent.parent / "README.md"
V_START, V_END = "<!-- verdicts:start -->", "<!-- verdicts:end -->"
SOAK = USAGE.parent / "soak-60min.json"
R_START, R_END = "<!-- reliability:start -->", "<!-- reliability:end -->"
HANDLER = USAGE.parent / "handler.md"
H_START, H_END = "<!-- handler-usage:start -->", "<!-- handler-usage:end -->"
PROBES = USAGE.parent / "probes.md"
P_START, P_END = "<!-- probes:start -->", "<!-- probes:end -->"
DECIDES = USAGE.parent / "how-it-decides.md"
S_START, S_END = "<!-- samples:start -->", "<!-- samples:end -->"
SOAK_DOC = USAGE.parent / "soak.md"
K_START, K_END = "<!-- soak-run:start -->", "<!-- soak-run:end -->"
E_START, E_END = "<!-- exit-codes:start -->", "<!-- exit-codes:end -->"
O_START, O_END = "<!-- shared-options:start -->", "<!-- shared-options:end -->"
G_START, G_END = "<!-- engine-row:start -->", "<!-- engine-row:end -->"
M_START, M_END = "<!-- post-mortem-files:start -->", "<!-- post-mortem-files:end -->"
NETDATA_DOC = USAGE.parent / "netdata.md"
N_START, N_END = "<!-- netdata-keys:start -->", "<!-- netdata-keys:end -->"
NETDATA_CONF = USAGE.parent.parent / "contrib" / "netdata" / "vllm.conf"
C_START, C_END = "# keys:start (generated from the option table: tools/update_readme.py)", "# keys:end"
HEALTH_CONF = NETDATA_CONF.parent / "health.d" / "vllm.conf"
L_START, L_END = "# alarms:start (generated from check_vllm/netdata/alarms.py: tools/update_readme.py)", "# alarms:end"
T_START, T_END = "<!-- netdata-alarms:start -->", "<!-- netdata-alarms:end -->"
FRONTENDS = USAGE.parent / "frontends.md"
F_START, F_END = "<!-- frontends:start -->", "<!-- frontends:end -->"
#: Each engine's page (docs/), by its row's key: its row's table is generated into it.
ENGINE_PAGES = {"vllm": "versions.md", "llamacpp": "llamacpp.md", "sglang": "sglang.md"}
#: What ends a run with each code besides the verdict words that carry it (the contract table owns those).
OTHER_CAUSES = (
    "",
    "a `-w`/`--kv-warning` range breached; idle with the probe rejected (4xx) or cut short by `-t`; the state "
    "file could not be saved (judged on the run alone)",
    "a `-c`/`--kv-critical` range breached",
    "bad usage, `--help`, `--version`; the `-t` timeout (says what it was waiting for); the state lock held by "
    "another run for too long; a state directory others may write; an internal error (message on stdout, "
    "traceback on stderr only)",
)
#: Example values for the golden table's placeholders (tests/e2e/test_golden.py pins every line with them).
EXAMPLES = {"<N>": "12", "<HH:MM:SS>": "05:22:58", "{url}": "http://127.0.0.1:8000", "{server_pid}": "4242",
            "{state}": "/var/lib/check_vllm"}


def help_of(parser_module: str) -> str:
    """A front end's --help as the docs carry it (100 columns: argparse wraps to the terminal)."""
    import importlib
    import os

    os.environ["COLUMNS"] = "100"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        importlib.import_module(parser_module).parser().print_help()
    return out.getvalue().rstrip() + "\n"


def usage() -> str:
    return help_of("check_vllm.nagios.cli")


def agent_usage() -> str:
    return help_of("check_vllm.haproxy.cli")


def handler_usage() -> str:
    return help_of("check_vllm.restart.options")


def post_mortem_files() -> str:
    """docs/handler.md's table of a post-mortem's files, from the README the bundle carries (postmortem/readme.py)."""
    from check_vllm.postmortem.readme import FILES

    return "\n".join(["| file | what it holds |", "|---|---|", *(f"| `{name}` | {what} |" for name, what in FILES)]) + "\n"


def render_handler(text: str) -> str:
    text = _between(text, M_START, M_END, post_mortem_files())
    return _between(text, H_START, H_END, f"```\n{handler_usage()}```\n")


def _between(text: str, start: str, end: str, block: str) -> str:
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}{end}{tail}"


def shared_options() -> str:
    """docs/usage.md's table of the options the front ends share, from check_vllm.cli.option_table."""
    import math

    from check_vllm.cli.option_table import AGENT, CHECK, FLAG, HANDLER, NETDATA, ROWS, TEXT

    fronts = (CHECK, AGENT, HANDLER, NETDATA)
    lines = ["| option | Netdata key | default | range | " + " | ".join(f"`{f}`" for f in fronts) + " |",
             "|---|---|---|---|" + "---|" * len(fronts)]
    for row in ROWS:
        if len(row.fronts) < 2:
            continue
        default = "off" if row.kind == FLAG else "none" if row.default is None else f"`{row.default:g}`" \
            if isinstance(row.default, float) else f"`{row.default}`"
        span = "" if row.kind in (TEXT, FLAG) else \
            f"{row.low:g} to {row.high:g}" if math.isfinite(row.high) else f"from {row.low:g}"
        key = f"`{row.dest}`" if NETDATA in row.fronts else ""
        was = "".join(f" (was `{alias}`)" for alias in row.aliases)
        lines.append(f"| `{row.flag}`{was} | {key} | {default} | {span} | "
                     + " | ".join("yes" if f in row.fronts else "" for f in fronts) + " |")
    return "\n".join(lines)


def _job_key(row) -> tuple[str, str, str]:
    """A Netdata job key's name, default and meaning, from its row (check_vllm.netdata.config.KEY_ROWS)."""
    import re

    from check_vllm.cli.option_table import FLAG

    default = ("yes" if row.default else "no") if row.kind == FLAG else "(required)" if row.dest == "url" else \
        "Netdata's" if row.dest == "update_every" else "none" if row.default is None else \
        f"{row.default:g}" if isinstance(row.default, float) else f"{row.default}"
    meaning = re.sub(r" ?\(default: %\(default\)[sg]\)|;? ?default: Netdata's update_every", "", row.help)
    was = "".join(f" (was {key})" for key in row.alias_keys)
    return row.dest + was, default, meaning.replace("%%", "%").replace("(required)", "").strip()


def netdata_keys() -> str:
    """docs/netdata.md's table of a job's keys: the option table's Netdata rows and the job's own."""
    from check_vllm.netdata.config import KEY_ROWS

    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{key.split(' ')[0]}`{key[len(key.split(' ')[0]):]} | {default} | {meaning} |"
              for key, default, meaning in map(_job_key, KEY_ROWS)]
    return "\n".join(lines) + "\n"


def netdata_conf_keys() -> str:
    """contrib/netdata/vllm.conf's header: the same keys, as comments an operator reads in the file."""
    import textwrap

    from check_vllm.netdata.config import KEY_ROWS

    lines = []
    for key, default, meaning in map(_job_key, KEY_ROWS):
        name, _, was = key.partition(" ")
        text = textwrap.wrap(f"{meaning} {was + ' ' if was else ''}[{default}]", 90, break_on_hyphens=False)
        lines.append(f"#   {name:<24} {text[0]}")
        lines += [f"#   {'':<24} {more}" for more in text[1:]]
    return "\n".join(lines) + "\n"


def netdata_alarms() -> str:
    """docs/netdata.md's table of the verdict alarms (check_vllm.netdata.alarms), and the words never alarmed."""
    from check_vllm.contract.vocab import BY_WORD, CODE_NAMES, UNKNOWN, WARNING
    from check_vllm.netdata.alarms import ALARMS, CRIT, QUIET, WARN, level_of
    from check_vllm.netdata.charts import state_value, word_id

    def at(word: str, level: str) -> str:
        return ", ".join(f"{CODE_NAMES[s]} (`{state_value(s)}`)" for s in BY_WORD[word].states
                         if level_of(word, s) == level) or "never"

    lines = ["| alarm | on `vllm.state` | lookup | WARNING when the verdict is | CRITICAL when | says |",
             "|---|---|---|---|---|---|"]
    lines += [f"| `{a.name}` | `{word_id(a.word)}` | {a.window}, every {a.every} | {at(a.word, WARN)} | "
              f"{at(a.word, CRIT)} | {a.info} |" for a in ALARMS]
    quiet = [f"- `{word}` at " + ", ".join(CODE_NAMES[s] for s in BY_WORD[word].states if s in (WARNING, UNKNOWN))
             + f": {why}" for word, why in QUIET.items()]
    return "\n".join([*lines, "", "Charted, never an alarm (a verdict at OK never is):", "", *quiet]) + "\n"


def render_netdata(text: str) -> str:
    return _between(_between(text, N_START, N_END, netdata_keys()), T_START, T_END, netdata_alarms())


def render_health_conf(text: str) -> str:
    from check_vllm.netdata.alarms import health_conf

    return _between(text, L_START, L_END, health_conf())


def render_frontends(text: str) -> str:
    """docs/frontends.md's table: every verdict's answer in every front end (tools/frontends.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from frontends import table

    return _between(text, F_START, F_END, table())


def render_netdata_conf(text: str) -> str:
    return _between(text, C_START, C_END, netdata_conf_keys())


def render(text: str) -> str:
    text = _between(text, START, END, f"```\n{usage()}```\n")
    return _between(text, O_START, O_END, shared_options() + "\n")


def render_agent(text: str) -> str:
    return _between(text, A_START, A_END, f"```\n{agent_usage()}```\n")


def verdicts() -> str:
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS

    rows = ["| word | state | restartable | meaning |", "|---|---|---|---|"]
    for w in VERDICTS:
        states = ", ".join(CODE_NAMES[c] for c in w.states)
        rows.append(f"| `{w.word}` | {states} | {'**yes** (CRITICAL)' if w.restartable else 'no'} | {w.meaning} |")
    return "\n".join(rows) + "\n"


def probes() -> str:
    """docs/probes.md's table: each verdict and state, and a fault of ours, as each probe kind answers it
    (check_vllm.probes.answers, which reads the restartable words and the rotation table)."""
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS
    from check_vllm.probes.answers import KINDS, STARTUP, Seen, answer

    def cell(kind: str, seen: Seen) -> str:
        a = answer(kind, seen)
        if a.passed:
            return "pass, in spite of it" if a.in_spite else "pass"
        if kind != STARTUP:
            return "**fail**"
        unless = [why for why, more in (("/metrics was read this run", {"reading": True}),
                                        ("its model list answered (it has loaded)", {"loaded": True}),
                                        ("the state file says it served before", {"served_before": True}))
                  if answer(kind, seen._replace(**more)).passed]
        return f"fail; pass if {' or '.join(unless)}" if unless else "fail"

    rows = ["| verdict | state | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    for w in VERDICTS:
        for state in w.states:
            seen = Seen(w.word, state, w.word)
            rows.append(f"| `{w.word}` | {CODE_NAMES[state]} | " + " | ".join(cell(k, seen) for k in KINDS) + " |")
    fault = Seen(fault="a fault of ours")
    rows.append("| a fault of ours: bad options, our own time-out, a state file it cannot write, the state lock "
                "held too long, a bug | | " + " | ".join(cell(k, fault) for k in KINDS) + " |")
    return "\n".join(rows) + "\n"


def render_probes(text: str) -> str:
    return _between(text, P_START, P_END, probes())


def exit_codes() -> str:
    """docs/how-it-decides.md's exit-code table: the words of each state from the contract table, and the rest."""
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS

    rows = ["| code | state | verdict words | also |", "|---|---|---|---|"]
    for code, name in enumerate(CODE_NAMES):
        words = ", ".join(f"`{w.word}`" + (" (restartable)" if w.restartable and code == 2 else "")
                          for w in VERDICTS if code in w.states)
        rows.append(f"| {code} | {name} | {words} | {OTHER_CAUSES[code]} |")
    return "\n".join(rows) + "\n"


def samples() -> str:
    """One sample line per verdict word and state, taken from the golden table (each line pinned there by a
    run of the installed check), placeholders filled with example values."""
    sys.path.insert(0, str(README.parent))
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS
    from tests.e2e.test_golden import CASES

    lines = [line for c in CASES for line in ((c.line,) if isinstance(c.line, str) else c.line[:1])
             if not any(aside in line for aside in ("outside range", "state not saved", "first reading"))]
    out = []
    for w in VERDICTS:
        for state in w.states:
            head = f"VLLM {CODE_NAMES[state]} - {w.word}:"
            line = next((ln for ln in lines if ln.startswith(head)), None)
            if line is None:
                continue
            for mark, example in EXAMPLES.items():
                line = line.replace(mark, example)
            out.append(line if not out else line.split(" | ")[0] + " | ...")
    return "```\n" + "\n".join(out) + "\n```\n"


def render_decides(text: str) -> str:
    return _between(_between(text, S_START, S_END, samples()), E_START, E_END, exit_codes())


def _words(sequence: str) -> Counter[str]:
    """The soak report's verdict sequence ('busy x3 > stalling/W > stuck/C!', tests/soak/report.py's _seq)
    as counts per word."""
    counts: Counter[str] = Counter()
    for part in sequence.split(" > "):
        head, _, n = part.partition(" x")
        if head != "-":
            counts[head.split("/")[0]] += int(n or 1)
    return counts


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f} s"


def _window_rows(res: dict) -> list[str]:
    rows = ["| windows | n | minutes | checks | OK / WARNING / CRITICAL | restarts | verdicts |",
            "|---|---:|---:|---:|---|---:|---|"]
    for kind in ("boot", "normal", "fault", "after"):
        ws = [w for w in res["windows"] if w["kind"] == kind]
        words = sum((_words(w["sequence"]) for w in ws), Counter())
        st = {s: sum(w["states"][s] for w in ws) for s in ("OK", "WARNING", "CRITICAL")}
        top = ", ".join(f"{w} {n}" for w, n in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])))
        rows.append(f"| {kind} | {len(ws)} | {sum(w['seconds'] for w in ws) / 60:.1f} | "
                    f"{sum(w['checks'] for w in ws)} | {st['OK']} / {st['WARNING']} / {st['CRITICAL']} | "
                    f"{sum(len(w['restarts']) for w in ws)} | {top} |")
    return rows


def _fault_rows(res: dict) -> list[str]:
    rows = ["| fault | restarts (expected) | to CRITICAL | to HARD CRITICAL | to restart | to OK |",
            "|---|---|---:|---:|---:|---:|"]
    for w in res["windows"]:
        if w["kind"] == "fault":
            on = ", on " + ", ".join(f"`{v}`" for v in w["restart_verdicts"]) if w["restart_verdicts"] else ""
            hold = f", {w['hold']:.0f} s" if w.get("hold") else ""
            rows.append(f"| {w['fault']}{hold} | {w['handler_restarts']} ({w['expected_restarts']}){on} | "
                        f"{_s(w['to_critical'])} | {_s(w['to_hard_critical'])} | {_s(w['to_restart'])} | "
                        f"{_s(w['to_ok'])} |")
    return rows


def reliability(res: dict) -> str:
    """The README's reliability block: one soak's checks, verdicts by window and restarts per fault."""
    m, p, t = res["meta"], res["probes"], res["tokens"]
    st = res["states"]
    head = (f"`SOAK_MINUTES={m['minutes']:g} SOAK_SEED={m['seed']}`: {res['checks']} checks (OK {st['OK']}, "
            f"WARNING {st['WARNING']}, CRITICAL {st['CRITICAL']}, UNKNOWN {st['UNKNOWN']}), "
            f"{res['traffic']['requests']} load requests, {res['handler_restarts']} restarts by the handler. "
            f"**False CRITICALs: {res['false_criticals']}. Inference requests the check sent while busy: "
            f"{p['sent_while_busy']}** ({p['counted_at_server']} probes counted at the server, by "
            f"{p['probing_checks']} checks, all on idle readings). tokens/s perfdata against the server's own "
            f"counter: {t['aggregate']:+.1%} over {t['intervals']} intervals.")
    return "\n".join([head, "", *_window_rows(res), "", *_fault_rows(res)]) + "\n"


def soak_run() -> str:
    """docs/soak.md's tables of the 60-minute run: the soak's own report (tests/soak/report.py's markdown, the
    same text as its soak-report.md) of docs/soak-60min.json, without its title, one heading level down."""
    sys.path.insert(0, str(README.parent))
    from tests.soak.report import markdown

    lines = markdown(json.loads(SOAK.read_text())).splitlines()[2:]
    return "\n".join("#" + line if line.startswith("## ") else line for line in lines) + "\n"


def render_soak(text: str) -> str:
    return _between(text, K_START, K_END, soak_run())


def engine_row(key: str) -> str:
    """What the check reads of one engine and which of its routes it asks, from its row
    (check_vllm.contract.engines)."""
    from check_vllm.contract.engines import BY_KEY

    row = BY_KEY[key]
    reads = "<br>".join(f"`{_sample(name)}` -> {field}" for name, field in row.samples.items())
    r = row.routes
    asks = [f"`/metrics` ({'the restricted page first' if r.metrics_filter else 'the whole page'})",
            "`/v1/models` (no model on the page, or the page unusable)", "`POST /v1/completions` (the idle probe)"]
    asks += [f"`{path}` ({why})" for path, why in ((r.paused, "a stall: paused on purpose?"),
                                                   (r.checkpoint, "a request turned away as paused"),
                                                   (r.engine_dead, "after a 5xx: did the engine die?")) if path]
    asks += [f"`{path}` (a stall: held for recovery?)" for path in r.faults]
    asks += [f"`{path}` (with `{r.paused}` 503: healthy, so paused rather than failed?)" for path in (r.healthy,) if path]
    asks += [f"`{path}` (before an idle probe: asleep? a probe would wake it)" for path in (r.asleep,) if path]
    asks += [f"`{path}` (work present and the counters printed too coarsely: the slots' exact counts)"
             for path in (r.slots,) if path]
    if r.router.models:
        asks += [f"router mode (its `/metrics` says \"{r.router.unnamed}\"): `{r.router.models}` for each model's "
                 f"state, then per {'/'.join(r.router.serving + r.router.sleeping)} model `/metrics?"
                 f"{r.router.select}=NAME&{r.router.no_load}` (and the probe with `?{r.router.no_load}`): a model not "
                 "loaded is never named, so never loaded"]
    witness = ", ".join([*(f"`{p}`" for p in row.programs), *(f"`{c} serve`" for c in row.serves),
                         *(f"`python -m {m}`" for m in row.modules)])
    lines = ["| | |", "|---|---|", f"| status line | `{row.label} OK - ...` |", f"| `--engine` | `{row.key}` |",
             f"| its page | `{row.prefix}` families{f', one engine per `{row.engine_label}`' if row.engine_label else ''} |",
             f"| read | {reads} |",
             f"| summed over series | {', '.join(sorted(row.summed)) or 'none'} |",
             f"| work gauges | {'lag (written now and then): work shown with nothing moving is no proof; the probe tells' if row.lagging_gauges else 'live'} |",
             f"| asked | {'<br>'.join(asks)} |",
             f"| never asked | {', '.join(f'`{p}`' for p in r.never) or 'anything not listed above'} |",
             f"| its process, for the host's witness | {witness}, port {row.default_port} unless {_port_from(row)} |",
             f"| metrics off | {f'`{row.metrics_flag}` turns `/metrics` on; without it: `no metrics` (WARNING, never restarted), liveness from `/v1/models`' if row.metrics_flag else 'always served'} |",
             f"| values printed | {_printed(row)} |",
             *([f"| sleep | `{row.sleep_flag}`: an idle server is not probed (asleep, or sleeping soon) |"] if row.sleep_flag else [])]
    return "\n".join(lines) + "\n"


def _printed(row) -> str:
    """How exactly its page prints a value, and what the check reads instead where it rounds."""
    if not row.counter_digits:
        return "exact"
    instead = f"`{row.routes.slots}` tells progress instead (work present)" if row.routes.slots else \
        "progress cannot be told from it, never stuck"
    return f"{row.counter_digits} significant digits: a counter past 10^{row.counter_digits} is not read; {instead}"


def _port_from(row) -> str:
    """Where its server takes its port, in the order it applies them."""
    ways = ["`--port`"] + [f"`{row.port_env}` in its environment"] * bool(row.port_env) \
        + [f"the `port:` of its `{row.config_flag}` YAML file"] * bool(row.config_flag)
    return ", else ".join(ways)


def _sample(name: str) -> str:
    """`family|label=value` (a row's split) as the page writes it: `family{label="value"}`."""
    family, _, label = name.partition("|")
    if not label:
        return family
    key, _, value = label.partition("=")
    return f'{family}{{{key}="{value}"}}'


def render_engine(key: str) -> Callable[[str], str]:
    return lambda text: _between(text, G_START, G_END, engine_row(key))


def render_readme(text: str) -> str:
    text = _between(text, V_START, V_END, verdicts())
    return _between(text, R_START, R_END, reliability(json.loads(SOAK.read_text())))


if __name__ == "__main__":
    for path, renderer in ((USAGE, render), (AGENT, render_agent), (README, render_readme), (PROBES, render_probes),
                           (HANDLER, render_handler), (DECIDES, render_decides), (SOAK_DOC, render_soak),
                           (NETDATA_DOC, render_netdata), (NETDATA_CONF, render_netdata_conf),
                           (HEALTH_CONF, render_health_conf), (FRONTENDS, render_frontends),
                           *((USAGE.parent / page, render_engine(key)) for key, page in ENGINE_PAGES.items())):
        text = path.read_text()
        new = renderer(text)
        if new != text:
            path.write_text(new)
            print(f"{path.name} updated")
    sys.exit(0)
