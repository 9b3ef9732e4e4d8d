"""The installed Debian package: its files where monitoring hosts look, and the check on Debian's own libraries.

    bash .ci/deb.sh && CHECK_VLLM_INSTALLED=deb python -m pytest -m package tests/package -q   (tox -e package)

Nothing here skips: without the installed package every test FAILS and says how to install it. The real
Icinga 2, Nagios 4 and Netdata tiers run against the same files in the same tox env (tests/monitoring,
tests/netdata with CHECK_VLLM_INSTALLED=deb).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from vllm_simulator import Simulator

from . import layout

pytestmark = pytest.mark.package

#: Runs a program the way Icinga 2 does: no venv, no PYTHONPATH, from /, and reports what it imported.
PROBE = """
import json, runpy, sys
sys.argv = [sys.argv[1], *sys.argv[2:]]
code = None
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exit:
    code = exit.code
mods = {m: sys.modules[m] for m in ("check_vllm", "httpx", "nagiosplugin") if m in sys.modules}
print(json.dumps({"code": code, "files": {m: mod.__file__ for m, mod in mods.items()},
                  "versions": {m: getattr(mod, "__version__", None) for m, mod in mods.items()}}), file=sys.stderr)
"""


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def dpkg_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"{package} is not installed: {out.stderr}"
    return out.stdout.split("-")[0]


def probe(program: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = subprocess.run([layout.SYSTEM_PYTHON, "-c", PROBE, str(program), *args], capture_output=True, text=True,
                         timeout=60, cwd="/", env=clean_env())
    report = json.loads(out.stderr.strip().splitlines()[-1])
    return out, report


@pytest.fixture(scope="module", autouse=True)
def package_installed() -> None:
    if not layout.deb():
        pytest.fail("set CHECK_VLLM_INSTALLED=deb after `bash .ci/deb.sh` (tox -e package does both)", pytrace=False)


def test_dpkg_owns_every_file_where_monitoring_hosts_look():
    out = subprocess.run(["dpkg", "-L", "check-vllm"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    owned = set(out.stdout.split())
    wanted = [layout.CHECK, layout.HANDLER, layout.AGENT, layout.ICINGA2_COMMANDS, layout.NETDATA_PLUGIN, layout.NETDATA_HEALTH,
              layout.STATE_DIR, *(layout.EXAMPLES / f for f in (
                  "icinga2/vllm-services.conf", "nagios/check_vllm.cfg", "netdata/vllm.conf",
                  "supervisor/vllm.conf", "sudoers.d/check_vllm", "prometheus/vllm-rules.yml",
                  "prometheus/check-vllm-agent-rules.yml",
                  "haproxy/haproxy.cfg", "kubernetes/vllm-deployment.yaml", "kubernetes/README.md",
                  "docker/compose.yaml", "docker/Dockerfile", "docker/restart-unhealthy"))]
    assert [str(p) for p in wanted if str(p) not in owned] == []
    for program in (layout.CHECK, layout.HANDLER, layout.AGENT, layout.NETDATA_PLUGIN):
        assert program.stat().st_mode & stat.S_IXOTH, program
        assert program.read_text().startswith(f"#!{layout.SYSTEM_PYTHON}\n"), program
    # the product only: no simulator, nothing on PATH
    assert not [p for p in owned if "vllm_simulator" in p or p.startswith("/usr/bin/")]


def test_the_state_directory_belongs_to_the_monitoring_user():
    st = layout.STATE_DIR.stat()
    assert stat.S_ISDIR(st.st_mode)
    assert pwd.getpwuid(st.st_uid).pw_name == "nagios", "icinga2 / nagios4 are installed, so the user nagios exists"
    assert stat.S_IMODE(st.st_mode) == 0o750


def test_the_installed_check_runs_on_debians_own_httpx_and_nagiosplugin(tmp_path: Path):
    sim = Simulator(scenario="idle").start()
    try:
        out, report = probe(layout.CHECK, "--url", sim.url, "--state-dir", str(tmp_path))
    finally:
        sim.stop()
    assert report["code"] == 0 and out.stdout.startswith("VLLM OK - idle"), (out.stdout, out.stderr)
    dist = "/usr/lib/python3/dist-packages/"
    assert all(f.startswith(dist) for f in report["files"].values()), report
    assert report["versions"]["httpx"] == dpkg_version("python3-httpx")
    assert report["versions"]["nagiosplugin"] == dpkg_version("python3-nagiosplugin")


def test_the_installed_handler_answers_as_a_check(tmp_path: Path):
    out, report = probe(layout.HANDLER, "--status", "--url", "http://127.0.0.1:9", "--state-dir", str(tmp_path))
    assert report["files"]["check_vllm"].startswith("/usr/lib/python3/dist-packages/"), report
    assert report["code"] == 0 and out.stdout.startswith("VLLM_RESTART OK - nothing to restart"), (out.stdout, out.stderr)


def test_icinga2_finds_the_commands_through_the_itl_alone(tmp_path: Path):
    """Debian's own /etc/icinga2 constants and `include <plugins-contrib>`: nothing copied."""
    conf = tmp_path / "icinga2.conf"
    conf.write_text('include "/etc/icinga2/constants.conf"\ninclude <itl>\ninclude <plugins>\n'
                    'include <plugins-contrib>\nobject Host "gpu-01" { check_command = "dummy" }\n'
                    'object Service "vllm" { host_name = "gpu-01"; check_command = "vllm"\n'
                    '  event_command = "vllm-restart"; vars.vllm_url = "http://127.0.0.1:8000" }\n')
    names = ("DataDir", "LogDir", "CacheDir", "SpoolDir", "InitRunDir")
    dirs = [f"-D{k}={tmp_path / k}" for k in names]
    for k in names:
        (tmp_path / k).mkdir()
    out = subprocess.run(["icinga2", "daemon", "-C", "-c", str(conf), *dirs], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "ICINGA2_USER": "root", "ICINGA2_GROUP": "root"})
    assert out.returncode == 0, out.stdout[-3000:]
    assert "Instantiated 1 Service." in out.stdout and "Instantiated 1 EventCommand." in out.stdout, out.stdout
