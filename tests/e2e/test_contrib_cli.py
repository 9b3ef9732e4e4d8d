"""check_vllm_contrib from a checkout (fast suite): list, show, write, and bad input as a message, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def contrib(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_vllm.contrib", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})


def test_list_names_the_directory_then_every_file():
    out = contrib("list")
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and Path(lines[0]).resolve() == REPO / "contrib"
    assert "icinga2/vllm-commands.conf" in lines[1:] and "sudoers.d/check_vllm" in lines[1:]
    assert len(lines[1:]) == sum(1 for p in (REPO / "contrib").rglob("*") if p.is_file())


def test_show_prints_one_file_and_refuses_a_name_it_did_not_list():
    out = contrib("show", "nagios/check_vllm.cfg")
    assert out.returncode == 0 and out.stdout == (REPO / "contrib" / "nagios" / "check_vllm.cfg").read_text()
    bad = contrib("show", "../setup.cfg")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == "check_vllm_contrib: no such file '../setup.cfg' (see `check_vllm_contrib list`)\n"


def test_write_keeps_a_file_the_operator_edited(tmp_path: Path):
    edited = tmp_path / "netdata" / "vllm.conf"
    edited.parent.mkdir()
    edited.write_text("[mine]\nurl = http://127.0.0.1:8000\n")
    out = contrib("write", str(tmp_path))
    assert out.returncode == 0 and "kept existing netdata/vllm.conf" in out.stdout, out
    assert edited.read_text() == "[mine]\nurl = http://127.0.0.1:8000\n"
    assert (tmp_path / "icinga2" / "vllm-commands.conf").read_bytes() == \
        (REPO / "contrib" / "icinga2" / "vllm-commands.conf").read_bytes()


def test_an_unwritable_target_is_a_message(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = contrib("write", str(blocker / "sub"))
    assert out.returncode == 1 and out.stderr.startswith(f"check_vllm_contrib: cannot write {blocker / 'sub'}: ")
    assert "Traceback" not in out.stderr


def test_no_command_is_a_usage_error():
    out = contrib()
    assert out.returncode == 2 and "usage: check_vllm_contrib" in out.stderr and "Traceback" not in out.stderr
