"""Each test directory is one tier, so its name says what it needs: a tier directory's every test module
carries that tier's marker (and no other), and a fast directory's carry none (they run in `py3`)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: directory -> the tier marker its modules carry (None: the fast suite, no marker)
TIERS: dict[str, str | None] = {
    "unit": None, "e2e": None, "hardening": None, "sim": None, "handler": None, "collector": None,
    "real_vllm": "real_vllm", "real_llamacpp": "real_llamacpp", "real_vllm_matrix": "real_vllm_matrix", "monitoring": "monitoring",
    "netdata": "netdata", "package": "package", "fleet": "fleet", "prometheus": "prometheus",
    "incident": "incident", "soak": "soak", "containers": "containers", "host": "host",
}


def _markers() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(TESTS.parent / "setup.cfg")
    return {line.split(":")[0].strip() for line in cfg["tool:pytest"]["markers"].splitlines() if line.strip()}


def test_every_test_directory_is_listed_with_its_tier():
    dirs = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert dirs == set(TIERS), f"new or gone test directories: {dirs ^ set(TIERS)}"
    assert {m for m in TIERS.values() if m} <= _markers()


def test_each_module_carries_its_directory_s_tier_marker_and_no_other():
    tiers = _markers()
    wrong = []
    for module in sorted(TESTS.glob("*/test_*.py")):
        found = set(re.findall(r"pytest\.mark\.(\w+)", module.read_text())) & tiers
        want = {TIERS[module.parent.name]} - {None}
        if found != want:
            wrong.append(f"{module.relative_to(TESTS)}: {sorted(found)}, its directory says {sorted(want)}")
    assert not wrong, "\n".join(wrong)
