"""Regenerate the usage block of docs/usage.md from `check_vllm --help`, and the README's verdict table from
the contract's table (check_vllm.contract.vocab.VERDICTS), so none of them drifts.

Run `python tools/update_readme.py`; tests/unit/test_readme.py fails when either is stale.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"
START, END = "<!-- usage:start -->", "<!-- usage:end -->"
README = USAGE.parent.parent / "README.md"
V_START, V_END = "<!-- verdicts:start -->", "<!-- verdicts:end -->"


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


def verdicts() -> str:
    from check_vllm.contract.vocab import CODE_NAMES, VERDICTS

    rows = ["| word | state | restartable | meaning |", "|---|---|---|---|"]
    for w in VERDICTS:
        states = ", ".join(CODE_NAMES[c] for c in w.states)
        rows.append(f"| `{w.word}` | {states} | {'**yes** (CRITICAL)' if w.restartable else 'no'} | {w.meaning} |")
    return "\n".join(rows) + "\n"


def render_readme(text: str) -> str:
    head, rest = text.split(V_START, 1)
    _, tail = rest.split(V_END, 1)
    return f"{head}{V_START}\n{verdicts()}{V_END}{tail}"


if __name__ == "__main__":
    for path, renderer in ((USAGE, render), (README, render_readme)):
        text = path.read_text()
        new = renderer(text)
        if new != text:
            path.write_text(new)
            print(f"{path.name} updated")
    sys.exit(0)
