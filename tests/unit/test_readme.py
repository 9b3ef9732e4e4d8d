"""The usage block of docs/usage.md is generated from --help: fail when someone forgot to regenerate it."""

from __future__ import annotations

import importlib.util
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
