"""The contributor's map kept true (issue 47): CONTRIBUTING's layout names every module of each package and every
test tier, its tiers table every tox env; and the layering it states holds in the imports (read with ast: no code
runs). Pure: reads files only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "CONTRIBUTING.md").read_text()
PACKAGE = REPO / "check_vllm"


def test_the_layout_names_every_module_of_each_package():
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `check_vllm/([a-z_]+)/` \| ([^|]*) \|", TEXT, re.M)}
    packages = sorted(d.name for d in PACKAGE.iterdir() if d.is_dir() and (d / "__init__.py").exists())
    assert sorted(rows) == packages
    for name, named in rows.items():
        have = {p.name for p in (PACKAGE / name).glob("*.py") if p.name != "__init__.py"}
        listed = set(re.findall(r"`([a-z_]+\.py)`", named))
        assert have == listed, (name, sorted(have - listed), sorted(listed - have))


def test_the_tiers_table_names_every_tier_and_tox_env():
    tiers = sorted(d.name for d in (REPO / "tests").iterdir()
                   if d.is_dir() and d.name not in ("rig", "fixtures", "__pycache__"))
    assert [t for t in tiers if f"`tests/{t}/" not in TEXT] == []
    envlist = re.search(r"^envlist = (.*)$", (REPO / "tox.ini").read_text(), re.M)
    assert envlist is not None
    assert [e for e in envlist.group(1).replace(" ", "").split(",") if f"| `{e}` |" not in TEXT] == []


def _imports(path: Path, allowed: frozenset[str] = frozenset()) -> set[str]:
    """The check_vllm packages (or top modules) a module imports, at any depth of its code, but the `allowed`
    modules (full names, `from PACKAGE import MODULE` included)."""
    return _imported(path.read_text(), allowed)


def _imported(source: str, allowed: frozenset[str] = frozenset()) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and names[0] and all(f"{names[0]}.{a.name}" in allowed for a in node.names):
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("check_vllm.") and n.count(".") >= 1
                  and n not in allowed}
    return found


#: What each layer may not import (CONTRIBUTING: imports only run downwards; the I/O never imports the judge, the
#: judge never imports I/O; the front ends import nothing of each other).
FORBIDDEN = {
    "contract": {"machine", "judge", "server", "memory", "observe", "session", "long_running", "cli", "probes",
                 "nagios", "restart", "netdata", "haproxy", "postmortem"},
    "machine": {"judge", "server", "memory", "observe", "session", "long_running", "cli", "probes", "nagios",
                "restart", "netdata", "haproxy", "postmortem"},
    "judge": {"machine", "server", "memory", "observe", "session", "long_running", "cli", "probes", "nagios", "restart",
              "netdata", "haproxy", "postmortem"},
    "server": {"judge", "observe", "session", "long_running", "cli", "probes", "nagios", "restart", "netdata",
               "haproxy", "postmortem"},
    "memory": {"judge", "server", "observe", "session", "long_running", "cli", "probes", "nagios", "restart", "netdata",
               "haproxy", "postmortem"},
    "cli": {"judge", "observe", "session", "long_running", "probes", "nagios", "restart", "netdata", "haproxy",
            "postmortem"},
    "probes": {"judge", "nagios", "restart", "netdata", "haproxy", "postmortem"},
    "postmortem": {"judge", "observe", "session", "long_running", "probes", "nagios", "restart", "netdata",
                   "haproxy"},
    "nagios": {"restart", "netdata", "haproxy", "postmortem"},
    "restart": {"nagios", "netdata", "haproxy"},
    "netdata": {"nagios", "restart", "haproxy", "postmortem"},
    "haproxy": {"nagios", "restart", "netdata", "postmortem"},
}


#: The one exception, by module (CONTRIBUTING: layout): the check's liveness probe keeps the handler's fleet restart
#: budget (issue 55), its options and its question defined once, in the restart package.
ALLOWED = {"nagios": frozenset({"check_vllm.restart.fleet_options", "check_vllm.restart.fleet_probe"})}


def test_imports_run_downwards():
    broken = []
    for layer, never in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).glob("*.py")):
            bad = _imports(path, ALLOWED.get(layer, frozenset())) & never
            if bad:
                broken.append(f"{layer}/{path.name} imports {sorted(bad)}")
    assert broken == []


def test_the_one_exception_is_held_to_its_modules():
    """nagios may import the restart package's fleet budget modules, and nothing else of it."""
    probe = PACKAGE / "nagios" / "probe.py"
    assert "restart" in _imports(probe)
    assert "restart" not in _imports(probe, ALLOWED["nagios"])
    stray = "from check_vllm.restart.fleet import Budget\nfrom check_vllm.restart import fleet_options, policy\n"
    assert _imported(stray, ALLOWED["nagios"]) == {"restart"}
    assert _imported("from check_vllm.restart import fleet_options\n", ALLOWED["nagios"]) == set()
