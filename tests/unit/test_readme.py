"""The README's usage section is generated from --help: fail when someone forgot to regenerate it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "tools" / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_usage_matches_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = (ROOT / "README.md").read_text()
    assert _tool().render(text) == text, "README usage is stale: run `COLUMNS=100 python tools/update_readme.py`"
