"""Regenerate the usage block of docs/usage.md from `check_vllm --help`, so the two never drift.

Run `python tools/update_readme.py`; tests/unit/test_readme.py fails when docs/usage.md is stale.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"
START, END = "<!-- usage:start -->", "<!-- usage:end -->"


def usage() -> str:
    import os

    from check_vllm.nagios.cli import parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: pin it so the output is stable

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        parser().print_help()
    return out.getvalue().rstrip() + "\n"


def render(text: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n```\n{usage()}```\n{END}{tail}"


if __name__ == "__main__":
    text = USAGE.read_text()
    new = render(text)
    if new != text:
        USAGE.write_text(new)
        print("docs/usage.md usage updated")
    sys.exit(0)
