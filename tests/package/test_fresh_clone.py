"""CONTRIBUTING's set-up lines, run as written on a fresh clone (issue 53): a new venv, its install line (every
extra the fast suite needs, py-spy included) and a module of the fast suite, in a copy of the checkout holding what
a clone of it holds. The whole suite (`pytest -q -n 8`, minutes) is the one line not run here: tox -e py3 runs it.

    python -m pytest -m package tests/package/test_fresh_clone.py -q     (tox -e package; needs the package index)

tests/unit/test_contributing_commands.py holds the same lines to setup.cfg and tox.ini without running them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.package

REPO = Path(__file__).resolve().parents[2]
#: What a clone never has, where the checkout is no git repository (an sdist): .gitignore's patterns.
IGNORED = (".git", "__pycache__", "*.egg-info", ".tox", ".venv", "build", "dist", ".hypothesis", ".pytest_cache",
           ".mypy_cache", ".ruff_cache", ".pybuild")


def setup_lines() -> list[str]:
    """The command lines of CONTRIBUTING's "Setting up" block, as a contributor types them."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text.split("\n## Setting up\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def fresh_clone(into: Path) -> Path:
    """The checkout as a clone of it holds it: the files git tracks or would track (new ones not yet added), as
    they are now, and nothing it ignores (no venv, no .tox, no egg-info, no caches)."""
    if not (REPO / ".git").exists():
        shutil.copytree(REPO, into, symlinks=True, ignore=shutil.ignore_patterns(*IGNORED))
        return into
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() or source.is_symlink():  # a file deleted but not yet staged is listed, and gone
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name, follow_symlinks=False)
    return into


def test_contributings_install_line_and_a_module_run_as_written_on_a_fresh_clone(tmp_path: Path):
    lines = setup_lines()
    run = [ln for ln in lines if not ln.startswith("pytest -q -n ")]
    assert len(run) == len(lines) - 1, lines  # all but the whole suite
    assert [ln.split()[0] for ln in run] == ["python3", "pip", "pytest"], run
    clone = fresh_clone(tmp_path / "clone")
    assert not (clone / ".venv").exists() and not list(clone.glob("*.egg-info"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CHECK_VLLM_INSTALLED")}
    # a time-out for a hung index only: pip fetches every extra's packages from nothing
    out = subprocess.run(["bash", "-euxc", "\n".join(run)], cwd=clone, env=env, capture_output=True, text=True,
                         timeout=1800)
    said = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0, said
    summary = out.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, said

    venv = clone / ".venv" / "bin"
    where = subprocess.run([str(venv / "python"), "-c", "import check_vllm; print(check_vllm.__file__)"], cwd="/",
                           env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).resolve() == (clone / "check_vllm" / "__init__.py").resolve(), where  # editable
    for program, first in (("check_vllm", "check_vllm "), ("py-spy", "py-spy ")):
        version = subprocess.run([str(venv / program), "--version"], env=env, capture_output=True, text=True,
                                 timeout=60)
        assert version.stdout.startswith(first), (program, version)
