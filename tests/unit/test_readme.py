"""The generated blocks (docs/usage.md from check_vllm --help, docs/haproxy-agent.md from check_vllm_agent
--help, the README's verdict table and its reliability tables and docs/soak.md's tables from the 60-minute soak's report, docs/probes.md's
probe table from check_vllm.probes.answers): fail when
someone forgot to regenerate them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "tools" / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_usage_block_matches_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    tool = _tool()
    assert tool.USAGE == ROOT / "docs" / "usage.md"
    text = tool.USAGE.read_text()
    assert tool.render(text) == text, "docs/usage.md is stale: run `COLUMNS=100 python tools/update_readme.py`"


def test_stale_usage_block_fails(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    tool = _tool()
    text = tool.USAGE.read_text()
    stale = text.replace("--stuck-readings N", "--stuck-readings COUNT", 1)
    assert stale != text
    assert tool.render(stale) != stale


def test_the_usage_block_lives_only_in_docs():
    tool = _tool()
    assert "<!-- usage:" not in (ROOT / "README.md").read_text()
    text = tool.USAGE.read_text()
    assert text.count(tool.START) == text.count(tool.END) == 1


def test_readme_verdict_table_is_the_contracts():
    text = (ROOT / "README.md").read_text()
    assert _tool().render_readme(text) == text, "README verdicts are stale: run `python tools/update_readme.py`"
    from check_vllm.contract.vocab import WORDS

    for word in WORDS:
        assert f"| `{word}` |" in text


def test_the_agent_help_block_is_current(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    tool = _tool()
    text = tool.AGENT.read_text()
    assert text.count(tool.A_START) == text.count(tool.A_END) == 1
    assert tool.render_agent(text) == text, "docs/haproxy-agent.md is stale: run `python tools/update_readme.py`"


def test_a_stale_agent_block_is_caught(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    tool = _tool()
    text = tool.render_agent(tool.AGENT.read_text())
    stale = text.replace("--idle-completion-every S", "--idle-completion-every SECONDS", 1)
    assert stale != text and tool.render_agent(stale) != stale


def test_every_reply_of_the_agent_table_is_in_its_help():
    from check_vllm.haproxy import reply

    helped = _tool().agent_usage()
    for word, state, words in reply.rows():
        assert f"{word:<13} {state:<9} {words}" in helped, (word, state)


def test_the_readme_reliability_tables_are_the_recorded_soaks():
    """The figures come from one run's report, kept beside the docs; the README is rendered from it."""
    tool = _tool()
    text = (ROOT / "README.md").read_text()
    assert text.count(tool.R_START) == text.count(tool.R_END) == 1
    assert tool.render_readme(text) == text, "README reliability is stale: run `python tools/update_readme.py`"
    res = json.loads(tool.SOAK.read_text())
    assert res["meta"]["minutes"] >= 60 and "shipped defaults" in res["meta"]["settings"], res["meta"]
    assert f"SOAK_SEED={res['meta']['seed']}" in text


def test_a_soak_sequence_reads_as_counts_per_word():
    words = _tool()._words("busy x3 > stalling/W > stuck/C! x2 > no metrics/W > busy")
    assert words == {"busy": 4, "stalling": 1, "stuck": 2, "no metrics": 1}
    assert _tool()._words("-") == {}


def test_the_probe_table_is_the_code_s():
    """docs/probes.md's table comes from check_vllm.probes.answers: every word and state of the contract has a row."""
    tool = _tool()
    text = tool.PROBES.read_text()
    assert text.count(tool.P_START) == text.count(tool.P_END) == 1
    assert tool.render_probes(text) == text, "docs/probes.md is stale: run `python tools/update_readme.py`"
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS

    for w in VERDICTS:
        for state in w.states:
            assert f"| `{w.word}` | {CODE_NAMES[state]} |" in text
    stale = text.replace("| `stuck` | CRITICAL | fail; pass if /metrics was read this run | **fail** | **fail** |",
                         "| `stuck` | CRITICAL | fail | **fail** | pass |", 1)
    assert stale != text and tool.render_probes(stale) != stale


def test_the_handler_help_block_is_current(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    tool = _tool()
    text = tool.HANDLER.read_text()
    assert text.count(tool.H_START) == text.count(tool.H_END) == 1
    assert tool.render_handler(text) == text, "docs/handler.md is stale: run `python tools/update_readme.py`"
    stale = text.replace("--cooldown S", "--cooldown SECONDS", 1)
    assert stale != text and tool.render_handler(stale) != stale


def test_the_samples_and_the_exit_code_table_are_current():
    """docs/how-it-decides.md: a sample line for every word and state the golden table pins, and the exit-code
    table from the contract table (issue 31: protocol was missing from the hand-typed one)."""
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS

    tool = _tool()
    text = tool.DECIDES.read_text()
    for start, end in ((tool.S_START, tool.S_END), (tool.E_START, tool.E_END)):
        assert text.count(start) == text.count(end) == 1
    assert tool.render_decides(text) == text, "docs/how-it-decides.md is stale: run `python tools/update_readme.py`"
    samples = text.split(tool.S_START, 1)[1].split(tool.S_END, 1)[0]
    assert {w.word for w in VERDICTS} == {w.word for w in VERDICTS if f" - {w.word}: " in samples}
    table = text.split(tool.E_START, 1)[1].split(tool.E_END, 1)[0]
    for w in VERDICTS:
        for state in w.states:
            row = next(ln for ln in table.splitlines() if ln.startswith(f"| {state} | {CODE_NAMES[state]} |"))
            assert f"`{w.word}`" in row, (w.word, row)
    stale = text.replace("`unreachable`, `protocol`", "`unreachable`", 1)
    assert stale != text and tool.render_decides(stale) != stale


def test_the_soak_tables_in_docs_are_the_reports():
    tool = _tool()
    text = tool.SOAK_DOC.read_text()
    assert text.count(tool.K_START) == text.count(tool.K_END) == 1
    assert tool.render_soak(text) == text, "docs/soak.md is stale: run `python tools/update_readme.py`"
    assert tool.render_soak(text.replace("| normal |", "| quiet |", 1)) != text.replace("| normal |", "| quiet |", 1)


def test_the_shared_option_table_is_the_code_s_and_netdata_says_the_same_defaults():
    """docs/usage.md's table comes from check_vllm.cli.option_table; so do docs/netdata.md's job keys and
    contrib/netdata/vllm.conf's header, with the job's own (update_every, probe)."""
    tool = _tool()
    text = tool.USAGE.read_text()
    assert text.count(tool.O_START) == text.count(tool.O_END) == 1
    assert tool.render(text) == text, "docs/usage.md is stale: run `python tools/update_readme.py`"
    netdata, conf = tool.NETDATA_DOC.read_text(), tool.NETDATA_CONF.read_text()
    assert tool.render_netdata(netdata) == netdata, "docs/netdata.md's job keys are stale: run tools/update_readme.py"
    assert tool.render_netdata_conf(conf) == conf, "contrib/netdata/vllm.conf's keys are stale: run the same"
    from check_vllm.netdata.config import KEYS

    for key in KEYS:
        assert f"`{key}`" in netdata or f"(was {key})" in netdata, key
        assert f"#   {key} " in conf or f"(was {key})" in conf, key


def test_each_engine_has_its_page_with_its_rows_table_and_the_readme_names_it():
    """docs/<engine>.md's table of what the check reads and asks comes from check_vllm.contract.engines."""
    tool = _tool()
    from check_vllm.contract.engines import ENGINES

    assert set(tool.ENGINE_PAGES) == {row.key for row in ENGINES}, "every engine has a page"
    readme = (tool.USAGE.parent.parent / "README.md").read_text()
    for row in ENGINES:
        page = tool.USAGE.parent / tool.ENGINE_PAGES[row.key]
        text = page.read_text()
        assert text.count(tool.G_START) == text.count(tool.G_END) == 1, page.name
        assert tool.render_engine(row.key)(text) == text, f"docs/{page.name} is stale: run tools/update_readme.py"
        assert f"(docs/{page.name})" in readme.split("## Two commands")[0], f"the README's first table links {page.name}"
        for path in row.routes.never:
            assert f"`{path}`" in text.split(tool.G_START)[1]


def test_the_netdata_verdict_alarms_are_the_code_s():
    """contrib/netdata/health.d/vllm.conf's verdict templates and docs/netdata.md's table of them come from
    check_vllm.netdata.alarms (issue 52: the level follows the verdict's state)."""
    tool = _tool()
    conf, doc = tool.HEALTH_CONF.read_text(), tool.NETDATA_DOC.read_text()
    assert conf.count(tool.L_START) == conf.count(tool.L_END) == 1
    assert doc.count(tool.T_START) == doc.count(tool.T_END) == 1
    assert tool.render_health_conf(conf) == conf, "health.d/vllm.conf is stale: run `python tools/update_readme.py`"
    assert tool.render_netdata(doc) == doc, "docs/netdata.md is stale: run `python tools/update_readme.py`"
    stale = conf.replace("     crit: ($this > 2.5 AND $this < 3.5)\n", "     warn: $this > 0\n", 1)
    assert stale != conf and tool.render_health_conf(stale) != stale
