"""What every tier directory's conftest does alike: mark its own tests with the tier's marker, and print the
reports its tests kept at the end of the run."""

from __future__ import annotations

from pathlib import Path

import pytest


def mark_tier(items, here: Path, marker: str) -> list:
    """Add `marker` to each collected item under `here`; the items that got it. Call from a tryfirst
    pytest_collection_modifyitems: the marker must be there before pytest's own -m deselection."""
    mine = [item for item in items if here in Path(str(item.fspath)).resolve().parents]
    for item in mine:
        item.add_marker(getattr(pytest.mark, marker))
    return mine


def write_reports(terminalreporter, reports: dict[str, str]) -> None:
    """Each kept report under its own title line, in the order the tests made them."""
    for title, text in reports.items():
        terminalreporter.write_sep("-", title)
        for line in text.splitlines():
            terminalreporter.write_line(line)


def write_summary(terminalreporter, reports: dict[str, str], timings: dict[str, float], tier: str) -> None:
    """A tier's kept reports, then its timings."""
    write_reports(terminalreporter, reports)
    if timings:
        terminalreporter.write_sep("-", f"{tier} tier timings")
        for k, v in timings.items():
            terminalreporter.write_line(f"{k}: {v:.1f}s")


def version_of(argv: list[str]) -> str:
    """The first line a component prints of its version ("?" when it prints nothing)."""
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except OSError as err:
        return f"? ({err})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "?"
