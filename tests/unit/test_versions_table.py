"""The "Supported vLLM versions" table of docs/versions.md is generated from the recorded pages and the release
matrix's results: fail when someone forgot to regenerate it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("supported_versions", ROOT / "tools" / "supported_versions.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_versions_table_is_current():
    tool = _tool()
    assert tool.VERSIONS == ROOT / "docs" / "versions.md"
    text = tool.VERSIONS.read_text()
    assert tool.render(text) == text, "docs/versions.md is stale: run `python tools/supported_versions.py`"


def test_every_recorded_release_has_a_row():
    tool = _tool()
    block = tool.render_block()
    for d in (ROOT / "tests" / "fixtures" / "real").iterdir():
        if d.is_dir() and tool.RELEASE_DIR.fullmatch(d.name):
            assert f"| {d.name} |" in block, d.name
    assert f"| {tool.base_release()} |" in block
