"""The sdist and the wheel, built from this checkout and installed from nothing as docs/install.md says.

The sdist must carry what the tests and Debian's build need; the wheel built from it must carry the licence,
the metadata an index shows, every contrib file (reachable with check_vllm_contrib), and no simulator.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from . import layout

pytestmark = pytest.mark.package

REPO = Path(__file__).resolve().parents[2]
INSTALL_DOC = REPO / "docs" / "install.md"
DOC_VENV, DOC_WHEEL, DOC_CONTRIB = "/opt/check_vllm", "check_vllm-0.1.0-py3-none-any.whl", "/etc/check_vllm-contrib"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`python -m build`: the sdist from the checkout, then the wheel from the sdist (as an index builds it)."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return {"sdist": next(out.glob("check_vllm-*.tar.gz")), "wheel": next(out.glob("check_vllm-*.whl"))}


def contrib_files() -> list[str]:
    return sorted(str(p.relative_to(REPO / "contrib")) for p in (REPO / "contrib").rglob("*") if p.is_file())


def test_the_sdist_carries_tests_tox_contrib_docs_and_the_debian_build(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    wanted = ["LICENSE", "tox.ini", "setup.py", "MANIFEST.in", "debian/control", "debian/rules", ".ci/deb.sh",
              "tests/package/test_wheel.py", "tests/rig/monitoring.py", "vllm_simulator/__init__.py",
              "docs/install.md", *(f"contrib/{f}" for f in contrib_files())]
    assert [n for n in wanted if n not in names] == []


def test_the_wheel_has_the_licence_the_metadata_and_contrib_but_no_simulator(dists):
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = whl.namelist()
        meta = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = whl.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    # .dist-info/LICENSE, or .dist-info/licenses/LICENSE with newer setuptools (core metadata 2.4)
    assert any(re.search(r"\.dist-info/(licenses/)?LICENSE$", n) for n in names), names
    data = [n.split(".data/data/share/check_vllm/contrib/", 1)[1] for n in names if "/share/check_vllm/contrib/" in n]
    assert sorted(data) == contrib_files()
    assert not [n for n in names if n.startswith("vllm_simulator/")] and "vllm-simulator" not in entry_points
    for line in ("License :: OSI Approved :: MIT License", "Operating System :: POSIX",
                 "Programming Language :: Python :: 3.11", "Topic :: System :: Monitoring"):
        assert f"Classifier: {line}" in meta
    assert "Project-URL: " in meta and "Requires-Python: >=3.11" in meta
    requires = re.findall(r"^Requires-Dist: (.*)$", meta, re.M)
    assert [r for r in requires if "prometheus" in r and "extra ==" not in r] == [], requires


def doc_block(heading: str) -> str:
    """The first ```sh block under a heading of docs/install.md: the test runs what the operator reads."""
    text = INSTALL_DOC.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_a_wheel_install_and_the_documented_steps_give_every_contrib_file(dists, tmp_path: Path):
    venv, target = tmp_path / "venv", tmp_path / "contrib"
    script = (doc_block("With pip").replace(DOC_VENV, str(venv)).replace(DOC_WHEEL, str(dists["wheel"]))
              .replace(DOC_CONTRIB, str(target)))
    out = subprocess.run(["bash", "-euxc", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"{venv}/share/check_vllm/contrib\n" in out.stdout, out.stdout
    written = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert written == contrib_files()
    assert all((target / f).read_bytes() == (REPO / "contrib" / f).read_bytes() for f in written)
    assert not (venv / "bin" / "vllm-simulator").exists()
    version = subprocess.run([str(venv / "bin" / "check_vllm"), "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("check_vllm 0.1.0"), version


def test_the_install_doc_names_every_path_the_package_installs():
    text = INSTALL_DOC.read_text()
    paths = [layout.CHECK, layout.HANDLER, layout.ICINGA2_COMMANDS, layout.NETDATA_PLUGIN, layout.NETDATA_HEALTH,
             layout.STATE_DIR, layout.EXAMPLES]
    assert [str(p) for p in paths if f"`{p}" not in text] == []
