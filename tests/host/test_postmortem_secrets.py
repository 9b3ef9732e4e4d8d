"""No secret leaves the host in a post-mortem (issue 51): look-alikes of each engine's server, real processes with
secrets planted in their command line, their environment and their --config file, dumped for real by py-spy and gdb;
not one planted string is in any file of the bundle, read as bytes, while the bundle still names the processes
and their stacks. Where a secret shows (py-spy's header is the whole command line; a thread or a helper process
named after a value the server was given; the /metrics page), it shows masked.

Root (like tests/host/test_postmortem.py: py-spy and gdb read another process); py-spy from the test environment,
gdb from Debian: missing, the tests fail."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from check_vllm.postmortem import dumpers
from check_vllm.postmortem.collect import Result, collect
from check_vllm.postmortem.dumpers import Tools
from tests.rig.bundles import outcome, text

pytestmark = [
    pytest.mark.host,  # real processes dumped: run alone, after the parallel suite
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: py-spy and gdb attach to the look-alikes"),
]

EVIDENCE = {"verdict": "stuck", "status": "VLLM CRITICAL - stuck: no progress for 120 s"}
#: The check's own API key (the caller's `secrets`), and a /metrics page that holds it and a password in a URL.
CHECK_KEY = "sk-checkKey1Q"
PAGE = ("HTTP 200 (text/plain)\n\nvllm:num_requests_running{model_name=\"m\"} 2\n"
        f"info{{upstream=\"https://admin:pw-metrics9@10.0.0.1:8000/v1\",key=\"{CHECK_KEY}\"}} 1\n")

#: A Python server that names a thread after each value its --config file and its secret variables gave it (as
#: a library may): py-spy prints the thread's name, /proc and gdb its first 15 bytes. It says "in" once all are.
LOOKALIKE = """
import ctypes, os, sys, threading, time

def leak(text, named):
    def hold():
        ctypes.CDLL(None).prctl(15, text.encode()[:15], 0, 0, 0)
        named.set()
        while True:
            time.sleep(0.05)
    threading.Thread(target=hold, name=text, daemon=True).start()
    named.wait(5)

config = sys.argv[sys.argv.index("--config") + 1] if "--config" in sys.argv else None
for line in open(config).read().splitlines() if config else []:
    key, _, value = line.partition(":")
    if key.strip() != "port":
        leak(value.strip().strip("'\\""), threading.Event())
for name in ("HF_TOKEN", "VLLM_API_KEY", "SGLANG_API_KEY", "OPENAI_API_KEY"):
    if name in os.environ:
        leak(os.environ[name], threading.Event())

def stuck_in_a_known_function():
    print("in", flush=True)
    while True:
        time.sleep(0.05)

stuck_in_a_known_function()
"""
#: llama-server: a native program (a copy of bash, named llama-server) running this script with llama-server's
#: options after it; two helper processes carry its secret variables in their command lines.
LLAMA_SCRIPT = """
( exec -a "helper-$LLAMA_API_KEY" sleep 300 ) & a=$!
( exec -a "hub $HF_TOKEN" sleep 300 ) & b=$!
for p in $a $b; do until read -r c < /proc/$p/comm && [ "$c" = sleep ]; do :; done; done
echo in
wait
"""


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start a look-alike in a session of its own (its helpers die with it) and wait for its "in"."""
    procs: list[subprocess.Popen] = []

    def start(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
        proc = subprocess.Popen(list(argv), cwd=cwd, env={"PATH": os.environ.get("PATH", os.defpath), **env},
                                stdout=subprocess.PIPE, start_new_session=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"in\n", argv
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def tools() -> Tools:
    found = dumpers.find()
    assert found.py_spy and found.gdb, f"py-spy (pip) and gdb (apt) must be installed for this tier: {found}"
    return found


def python_server(root: Path, module: str) -> Path:
    """A package tree in which `python -m module` is the look-alike."""
    path = root / "lookalike" / Path(*module.split("."))
    for parent in [p for p in path.parents if root / "lookalike" in p.parents]:
        parent.mkdir(parents=True, exist_ok=True)
        (parent / "__init__.py").touch()
    path.with_suffix(".py").write_text(LOOKALIKE)
    return root / "lookalike"


def leaked(result: Result, planted: Sequence[str]) -> list[tuple[str, str]]:
    """(file, secret) for each planted secret found in a file of the bundle, every file read as bytes."""
    assert result.path is not None, result.steps
    files = sorted(result.path.iterdir())
    assert {"tree.txt", "evidence.json", "collection.json", "README.txt"} <= {f.name for f in files}
    return [(f.name, s) for f in files for s in planted if s.encode() in f.read_bytes()]


def take(tmp_path: Path, pid: int) -> Result:
    return collect(tmp_path / "pm", [pid], lambda: PAGE, EVIDENCE, secrets=[CHECK_KEY], tools=tools())


def test_a_vllm_servers_argv_environment_and_config_secrets_are_in_no_file(tmp_path: Path, spawn):
    (tmp_path / "cfg.yaml").write_text('port: 8000\napi-key: sk-vllmCfg5Key\nhf_token: "hf_vllmCfgTok"\n')
    planted = ["sk-vllmArgv7Q", "hf_vllmArgvTk", "sk-vllmCfg5Key", "hf_vllmCfgTok", "vllmEnvKey9q", "hf_vllmEnvTok",
               CHECK_KEY, "pw-metrics9"]
    proc = spawn([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--tokenizer", "tok",
                  "--api-key", "sk-vllmArgv7Q", "--hf-token=hf_vllmArgvTk", "--max-num-batched-tokens", "8192",
                  "--config", "cfg.yaml"], tmp_path,
                 {"PYTHONPATH": str(python_server(tmp_path, "vllm.entrypoints.openai.api_server")),
                  "VLLM_API_KEY": "vllmEnvKey9q", "HF_TOKEN": "hf_vllmEnvTok"})
    result = take(tmp_path, proc.pid)
    assert not leaked(result, planted), result.steps
    assert outcome(result, f"py-spy {proc.pid}").startswith("ok"), result.steps
    dump = text(result, f"py-spy-{proc.pid}.txt")
    assert "stuck_in_a_known_function" in dump and dump.count('"***"') == 4, dump  # the four threads named
    assert "--api-key *** --hf-token=*** --max-num-batched-tokens 8192 --config cfg.yaml" in dump.splitlines()[0]
    assert "--tokenizer tok --api-key *** --hf-token=***" in text(result, "tree.txt")
    assert "(***)" in text(result, f"proc-{proc.pid}.txt"), "a thread's kernel name masked"
    metrics = text(result, "metrics.txt")
    assert 'vllm:num_requests_running{model_name="m"} 2' in metrics and "https://***@10.0.0.1:8000/v1" in metrics


def test_a_llama_servers_short_options_url_and_environment_are_in_no_file(tmp_path: Path, spawn):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    shutil.copy("/bin/bash", bin_ / "llama-server")
    (tmp_path / "serve.sh").write_text(LLAMA_SCRIPT)
    planted = ["hf_llamaShortB", "pw-llamaUrlC", "sk-llamaArgvD", "sk-llamaEnvKeyE", "hf_llamaEnvTokF", CHECK_KEY]
    proc = spawn([str(bin_ / "llama-server"), "serve.sh", "-hft", "hf_llamaShortB", "-mu",
                  "https://user:pw-llamaUrlC@host/m.gguf", "--api-key", "sk-llamaArgvD", "-c", "4096"], tmp_path,
                 {"LLAMA_API_KEY": "sk-llamaEnvKeyE", "HF_TOKEN": "hf_llamaEnvTokF"})
    result = take(tmp_path, proc.pid)
    assert not leaked(result, planted), result.steps
    tree = text(result, "tree.txt")
    assert "llama-server serve.sh -hft *** -mu https://***@host/m.gguf --api-key *** -c 4096" in tree, tree
    assert "helper-*** 300" in tree and "hub *** 300" in tree, tree
    assert outcome(result, f"gdb {proc.pid}").startswith("ok") and "#0 " in text(result, f"gdb-{proc.pid}.txt")


def test_an_sglang_servers_secrets_are_in_no_file(tmp_path: Path, spawn):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "sgl.yaml").write_text("admin_api_key: 'adm-sglCfgG'\n")
    planted = ["sk-sglArgvE", "adm-sglArgvF", "adm-sglCfgG", "sglEnvKeyH", CHECK_KEY]
    proc = spawn([sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--api-key", "sk-sglArgvE",
                  "--admin-api-key=adm-sglArgvF", "--skip-tokenizer-init", "--config", "conf/sgl.yaml"], tmp_path,
                 {"PYTHONPATH": str(python_server(tmp_path, "sglang.launch_server")), "SGLANG_API_KEY": "sglEnvKeyH"})
    result = take(tmp_path, proc.pid)
    assert not leaked(result, planted), result.steps
    dump = text(result, f"py-spy-{proc.pid}.txt")
    assert "stuck_in_a_known_function" in dump and dump.count('"***"') == 2, dump
    assert "--api-key *** --admin-api-key=*** --skip-tokenizer-init --config conf/sgl.yaml" in text(result, "tree.txt")
