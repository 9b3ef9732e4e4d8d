"""Shared by the fleet tests: the INSTALLED check_vllm run as a scheduler runs it, and shipped files made local."""

from __future__ import annotations

import pytest

from tests.rig.scripts import Result, run_check, script  # noqa: F401  (the fleet's modules take them from here)

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3


def localise(text: str, replacements: dict[str, str]) -> str:
    """A shipped file with its example names swapped for the test's; each one must be there (or the file
    changed under the test, and the test must say so)."""
    for old, new in replacements.items():
        if old not in text:
            pytest.fail(f"the shipped file no longer contains {old!r}: update the fleet test", pytrace=False)
        text = text.replace(old, new)
    return text
