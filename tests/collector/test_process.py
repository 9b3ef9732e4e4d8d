"""The process contract with Netdata, tested on the real process: `vllm.plugin UPDATE_EVERY`."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from check_vllm.netdata.config import load, load_file
from check_vllm.netdata.install import install

REPO = Path(__file__).resolve().parents[2]


def plugin(tmp_path: Path, conf: str | None, *args: str) -> subprocess.Popen[str]:
    if conf is not None:
        (tmp_path / "vllm.conf").write_text(conf)
    launcher = install(tmp_path / "plugins.d")
    env = dict(os.environ, NETDATA_USER_CONFIG_DIR=str(tmp_path))
    return subprocess.Popen([str(launcher), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)


def first_line(proc: subprocess.Popen[str], timeout: float = 10.0) -> str:
    """The plugin's first line of output, or a failure (not a hung test) when none comes in time."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no output within {timeout:g} s: start-up blocks"
    return proc.stdout.readline()  # type: ignore[union-attr]


def test_the_launcher_pins_this_interpreter(tmp_path):
    launcher = install(tmp_path)
    assert launcher.read_text().splitlines()[0] == f"#!{sys.executable}"
    assert os.access(launcher, os.X_OK)


def test_runs_until_sigterm_then_exits_0(make_sim, tmp_path):
    sim = make_sim(scenario="busy")
    proc = plugin(tmp_path, f"[a]\nurl = {sim.url}\n[b]\nurl = http://127.0.0.1:9\n", "1")
    first = proc.stdout.readline()  # type: ignore[union-attr]
    assert first.startswith("CHART vllm_")
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=5)
    assert proc.returncode == 0, err
    assert "BEGIN vllm_a.state" in out and "BEGIN vllm_b.state" in out
    assert "job b: down: connection refused" in err
    assert "Traceback" not in err


def test_exits_0_when_netdata_closes_the_pipe(make_sim, tmp_path):
    sim = make_sim(scenario="busy")
    proc = plugin(tmp_path, f"[a]\nurl = {sim.url}\n", "1")
    proc.stdout.readline()  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    assert proc.wait(timeout=5) == 0
    assert "Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


def test_disables_itself_only_when_no_job_can_work(tmp_path):
    proc = plugin(tmp_path, "[a]\nurl = ftp://x\nstuck_seconds = soon\n", "1")
    out, err = proc.communicate(timeout=10)
    assert out == "DISABLE\n" and proc.returncode == 1
    assert "job [a] skipped: url = 'ftp://x' is not an http:// or https:// URL" in err

    missing = plugin(tmp_path / "none", None, "1")
    out, err = missing.communicate(timeout=10)
    assert out == "DISABLE\n" and "cannot read" in err


def test_config_defaults_bad_sections_and_secrets(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-secret\n")
    jobs, problems = load(
        "[DEFAULT]\nstuck_seconds = 30\n"
        f"[GPU-1]\nurl = http://10.0.0.1:8000/\napi_key_file = {key}\nupdate_every = 5\nprobe = no\n"
        "[slow]\nurl = http://10.0.0.2:8000\nupdate_every = 1\n"
        "[bad]\nurl = http://10.0.0.3\nprobe = maybe\n"
        "[typo]\nurl = http://10.0.0.4\nstuck_secs = 3\n"
        "[gpu_1]\nurl = http://10.0.0.5\n",
        plugin_every=2,
    )
    assert [(j.name, j.url, j.update_every, j.stuck_seconds, j.completes_when_idle) for j in jobs] == [
        ("gpu_1", "http://10.0.0.1:8000", 5, 30.0, False),
        ("slow", "http://10.0.0.2:8000", 2, 30.0, True),
    ]
    assert jobs[0].endpoint.api_key == "sk-secret" and "sk-secret" not in repr(jobs[0])
    assert problems == [
        "job [bad] skipped: probe = 'maybe' is not yes or no",
        "job [typo] skipped: unknown option(s) stuck_secs",
        "job [gpu_1] skipped: its chart id vllm_gpu_1 is taken by another job",
    ]


def test_a_bad_section_costs_only_its_own_job_and_nothing_blocks(make_sim, tmp_path):
    """Latin-1 in a comment, a UTF-16 key file, a FIFO key file: the good job charts, the bad ones are named."""
    sim = make_sim(scenario="busy")
    (tmp_path / "utf16").write_bytes("sk-secret\n".encode("utf-16"))
    os.mkfifo(tmp_path / "fifo")  # nobody ever writes it: a blocking open would wait for ever
    conf = (f"[good]\n# caf\xe9 on the second floor\nurl = {sim.url}\n"
            f"[wide]\nurl = {sim.url}\napi_key_file = {tmp_path / 'utf16'}\n"
            f"[pipe]\nurl = {sim.url}\napi_key_file = {tmp_path / 'fifo'}\n").encode("latin-1")
    (tmp_path / "vllm.conf").write_bytes(conf)
    proc = plugin(tmp_path, None, "1")
    try:
        assert first_line(proc).startswith("CHART vllm_good.")
        time.sleep(1.5)  # a second tick: communicate() reads past what readline() buffered
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "BEGIN vllm_good.state" in out and "vllm_wide" not in out and "vllm_pipe" not in out
    assert "job [wide] skipped: api_key_file" in err and "not UTF-8" in err
    assert "job [pipe] skipped: cannot read api_key_file" in err and "not a regular file" in err
    assert "Traceback" not in err and "DISABLE" not in out


def test_undecodable_values_cost_their_section_and_a_huge_key_file_is_refused(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"k" * 100_000)
    (tmp_path / "vllm.conf").write_bytes(
        b"[ok]\nurl = http://10.0.0.1\n[latin]\nurl = http://10.0.0.2\nmodel = mod\xe8le\n"
        + f"[big]\nurl = http://10.0.0.3\napi_key_file = {big}\n".encode())
    jobs, problems = load_file(tmp_path / "vllm.conf", 1)
    assert [j.name for j in jobs] == ["ok"]
    assert problems == ["job [latin] skipped: not UTF-8 text in model",
                        f"job [big] skipped: cannot read api_key_file {big}: larger than 16 KiB"]
    os.mkfifo(tmp_path / "conf-fifo")
    assert load_file(tmp_path / "conf-fifo", 1) == ([], [f"cannot read {tmp_path / 'conf-fifo'}: not a regular file"])
