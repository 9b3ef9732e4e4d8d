"""CONTRIBUTING's commands work as written on a fresh clone (issue 53): its install line names extras that exist, as
many as the fast suite needs (every package its tests, the rig they use, the product and the simulator import;
pytest-xdist for `-n`; py-spy, which the handler's post-mortem runs for real), and agrees with tox's `py3`; each
pytest command it shows names what exists. Pure: reads files and this environment's package metadata.
tests/package/test_fresh_clone.py runs the lines in a fresh venv."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The tiers tox -e py3 runs: the fast suite, then tests/host alone, in the one venv.
FAST = ("unit", "e2e", "sim", "hardening", "handler", "collector", "host")
#: What the fast suite runs rather than imports: `-n 8` is pytest-xdist; the handler's post-mortem runs py-spy.
RUNS = {"pytest-xdist", "py-spy"}


def setup_block() -> list[str]:
    """The command lines of CONTRIBUTING's "Setting up" block, as a contributor types them."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    section = text.split("\n## Setting up\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def install_extras() -> list[str]:
    """The extras of the block's one `pip install -e '.[...]'`."""
    [line] = [ln for ln in setup_block() if ln.startswith("pip install ")]
    words = shlex.split(line, comments=True)
    assert words[:3] == ["pip", "install", "-e"] and len(words) == 4, words
    match = re.fullmatch(r"\.\[([a-z0-9_,-]+)\]", words[3])
    assert match, words[3]
    return match.group(1).split(",")


def normal(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(lines: str) -> set[str]:
    return {normal(re.match(r"[A-Za-z0-9._-]+", ln.strip()).group(0))  # type: ignore[union-attr]
            for ln in lines.splitlines() if ln.strip() and not ln.strip().startswith("#")}


def setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "setup.cfg")
    return cfg


def covered(extras: list[str]) -> set[str]:
    """The distributions `pip install -e '.[extras]'` asks for by name."""
    cfg = setup_cfg()
    found = _requirements(cfg["options"]["install_requires"])
    for extra in extras:
        found |= _requirements(cfg["options.extras_require"][extra])
    return found


def _optional(tree: ast.AST) -> set[int]:
    """The ids of import nodes inside a `try` that catches ImportError: the code runs without them."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def imported_modules() -> set[str]:
    """The top-level modules imported anywhere in the fast suite's tests, the rig modules they reach, the product,
    the simulator and the Netdata shim (at any depth of their code, optional imports aside)."""
    todo = [p for d in FAST for p in (REPO / "tests" / d).rglob("*.py")]
    for package in ("check_vllm", "vllm_simulator", "netdata_plugin"):
        todo += list((REPO / package).rglob("*.py"))
    seen: set[Path] = set()
    found: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text())
        optional = _optional(tree)
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            if isinstance(node, ast.ImportFrom) and node.module == "tests.rig":
                names = [f"tests.rig.{a.name}" for a in node.names]
            for name in names:
                found.add(name.split(".")[0])
                if name.startswith("tests.rig."):
                    rig = REPO / "tests" / "rig" / f"{name.split('.')[2]}.py"
                    if rig.exists():
                        todo.append(rig)
    ours = {"check_vllm", "vllm_simulator", "netdata_plugin", "tests"}
    return {m for m in found - ours if m not in sys.stdlib_module_names}


def test_the_block_is_a_venv_the_install_and_pytest_as_tox_runs_it():
    lines = setup_block()
    assert lines[0].startswith("python3 -m venv .venv && . .venv/bin/activate"), lines
    kinds = [ln.split()[0] for ln in lines[1:]]
    assert kinds[0] == "pip" and set(kinds[1:]) == {"pytest"}, lines
    tox = re.search(r"^commands =\n\s+pytest \{posargs:([^}]*)\}", (REPO / "tox.ini").read_text(), re.M)
    assert tox is not None
    shown = [shlex.split(ln, comments=True) for ln in lines if ln.startswith("pytest ")]
    whole = ["pytest", *[w for w in tox.group(1).split() if not w.startswith("--durations")]]
    assert whole in shown, (whole, shown)  # the whole suite, as tox -e py3 runs it


def test_the_install_line_names_extras_that_exist_and_all_tox_py3_installs():
    extras = install_extras()
    have = setup_cfg()["options.extras_require"]
    assert [e for e in extras if e not in have] == [], (extras, list(have))
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    env = tox["testenv"]
    assert [e.strip() for e in env["extras"].split(",") if e.strip() not in extras] == []
    assert _requirements(env["deps"]) - covered(extras) == set(), env["deps"]


def test_the_install_line_covers_every_package_the_fast_suite_imports_and_runs():
    by_module = importlib.metadata.packages_distributions()
    modules = imported_modules()
    unknown = sorted(m for m in modules if m not in by_module)
    assert unknown == [], f"imported by the fast suite, not installed here: {unknown}"
    needed = {normal(d) for m in modules for d in by_module[m]} | RUNS
    missing = needed - covered(install_extras())
    assert missing == set(), f"the fast suite needs {sorted(missing)}: name their extra in CONTRIBUTING's install line"
    assert "py-spy" in covered(install_extras())


def test_the_scan_follows_the_rig_and_skips_optional_imports():
    modules = imported_modules()
    assert {"httpx", "nagiosplugin", "pytest", "hypothesis", "yaml", "prometheus_client"} <= modules
    assert "cryptography" not in modules  # tests/hardening/test_transport.py falls back to the openssl CLI
    assert "torch" not in modules  # the real tiers' rig (make_tiny_model.py) is not the fast suite's


def test_each_pytest_command_shown_names_what_exists():
    markers = set(re.findall(r"^\s+([a-z_]+): ", setup_cfg()["tool:pytest"]["markers"], re.M))
    for line in setup_block():
        words = shlex.split(line, comments=True)
        if words[0] != "pytest":
            continue
        paths = [w for w in words[1:] if not w.startswith("-") and not w.isdigit() and w not in markers]
        assert all((REPO / p.split("::")[0]).exists() for p in paths), line
