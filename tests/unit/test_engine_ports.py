"""The port an engine's server serves is told where its row says (--port first, then llama.cpp's LLAMA_ARG_PORT in
its environment, vLLM's and SGLang's --config YAML, then the default), and a port that cannot be told is never the
default; the idle seconds after which llama-server sleeps are read from its command line. Real look-alike
processes on free loopback ports: the interpreter under the server's name (a symlink named llama-server), or
`python -c ... sglang serve --config F` as the host tests run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Options
from check_vllm.contract.engines import LLAMA_CPP, SGLANG, VLLM
from check_vllm.server import processes, procfs, serverargs
from check_vllm.server.host import idle_sleep
from tests.rig.ports import free_port

SLEEPER = "import time; time.sleep(120)"

Spawn = Callable[..., subprocess.Popen]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Starts a look-alike: `llama-server ARGS` (the interpreter under that name) or `python -c SLEEPER ARGS`,
    and waits until /proc shows its command line; killed at the end."""
    server = tmp_path / "llama-server"
    server.symlink_to(os.path.realpath(sys.executable))
    procs: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None, llama: bool = True, cwd: Path | None = None) \
            -> subprocess.Popen:
        argv = [str(server) if llama else sys.executable, "-c", SLEEPER, *args]
        environ = {k: v for k, v in os.environ.items() if k != LLAMA_CPP.port_env}
        proc = subprocess.Popen(argv, env={**environ, **(env or {})}, cwd=cwd)
        procs.append(proc)
        deadline = time.monotonic() + 10
        while procfs.cmdline(proc.pid) != argv:
            assert time.monotonic() < deadline, "the look-alike did not start"
            time.sleep(0.02)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _port_of(proc: subprocess.Popen) -> int | None:
    return processes.api_port(procfs.cmdline(proc.pid), f"/proc/{proc.pid}/cwd", None,
                              serverargs.environ(proc.pid))


def test_llama_servers_port_from_its_environment_is_found_by_port(spawn):
    port = free_port()
    proc = spawn("-m", "m.gguf", env={"LLAMA_ARG_PORT": str(port)})
    assert _port_of(proc) == port
    seen = processes.by_command_line(port)
    assert seen is not None and seen.process is not None, seen
    assert (seen.process.pid, seen.process.engine) == (proc.pid, LLAMA_CPP.name)


def test_the_command_lines_port_beats_the_environments(spawn):
    port, other = free_port(), free_port()
    proc = spawn("--port", str(port), env={"LLAMA_ARG_PORT": str(other)})
    assert _port_of(proc) == port
    seen = processes.by_command_line(port)
    assert seen is not None and seen.process is not None and seen.process.pid == proc.pid
    # not the environment's port: this process is not named for it (the host's other servers, a real tier's vLLM in
    # its containers' namespaces, may be named or noted: they are not this test's)
    elsewhere = processes.by_command_line(other)
    assert (elsewhere.process is None or elsewhere.process.pid != proc.pid) and str(proc.pid) not in elsewhere.error


def test_an_unreadable_environment_tells_no_port_and_never_the_default():
    argv = ["llama-server", "-m", "m.gguf"]
    assert processes.api_port(argv, environ=None) is None
    assert processes.api_port(argv, environ={}) == LLAMA_CPP.default_port
    assert processes.api_port(argv, environ={"LLAMA_ARG_PORT": "9191"}) == 9191
    assert processes.api_port(argv, environ={"LLAMA_ARG_PORT": "x"}) is None
    assert processes.api_port([*argv, "--port", "9292"], environ=None) == 9292  # --port needs no environment
    assert processes.api_port(["vllm", "serve", "m"], environ=None) == VLLM.default_port  # no port_env: not asked
    assert not processes.serves_port(argv, LLAMA_CPP.default_port, environ=None)


def test_an_environment_is_read_as_getenv_reads_it(spawn):
    """NUL-separated name=value entries; no process, no environment."""
    proc = spawn(env={"LLAMA_ARG_PORT": "8181", "EMPTY": ""})
    env = serverargs.environ(proc.pid)
    assert env is not None and env["LLAMA_ARG_PORT"] == "8181" and env["EMPTY"] == ""
    assert serverargs.environ(2 ** 22 + 12345) is None  # no such process


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to read as another user (nobody)")
def test_another_users_unreadable_environment_is_untold_unless_the_command_line_says(spawn):
    """Read as nobody: root's llama-server whose port is only in its environment cannot be told (untold, the
    blind's reason), never taken for the default's; one with --port is told all the same (then counted as
    elsewhere: nobody cannot read its network namespace either). Forked, so nothing is imported as nobody."""
    port, told = free_port(), free_port()
    hidden = spawn(env={"LLAMA_ARG_PORT": str(port)})
    shown = spawn("--port", str(told), env={"LLAMA_ARG_PORT": str(port)})
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            servers, untold, elsewhere = processes._api_servers(None)
            os.write(write, json.dumps([serverargs.environ(hidden.pid), _port_of(hidden), _port_of(shown),
                                        sorted(p for pids in servers.values() for p in pids), untold,
                                        elsewhere]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        got = fh.read().decode()
    os.waitpid(child, 0)
    env, hidden_port, shown_port, found, untold, elsewhere = json.loads(got)
    assert (env, hidden_port, shown_port) == (None, None, told)
    assert hidden.pid not in found and shown.pid not in found
    assert f"llama.cpp process {hidden.pid}: its port cannot be told here" in untold
    assert f"llama.cpp process {shown.pid}: it runs in another network namespace" in elsewhere


def test_sglangs_config_file_names_its_port(tmp_path: Path, spawn):
    port = free_port()
    (tmp_path / "sglang.yaml").write_text(f"model-path: m\nport: {port}  # the API\nenable-metrics: true\n")
    proc = spawn("sglang", "serve", "--config", str(tmp_path / "sglang.yaml"), llama=False)
    assert processes.engine_of(procfs.cmdline(proc.pid)) is SGLANG
    assert _port_of(proc) == port
    seen = processes.by_command_line(port)
    assert seen is not None and seen.process is not None, seen
    assert (seen.process.pid, seen.process.engine) == (proc.pid, SGLANG.name)
    assert processes.api_port(["sglang", "serve", "--config", str(tmp_path / "sglang.yaml"), "--port", "30009"]) \
        == 30009  # the command line overrides the file
    assert processes.api_port(["sglang", "serve", "--config", str(tmp_path / "none.yaml")]) is None


def test_vllms_config_file_is_read_as_before(tmp_path: Path, spawn):
    port = free_port()
    (tmp_path / "vllm.yaml").write_text(f"port: '{port}'\n")
    (tmp_path / "portless.yaml").write_text("model: m\n")
    proc = spawn("vllm", "serve", "m", "--config", "vllm.yaml", llama=False, cwd=tmp_path)  # the server's folder
    assert _port_of(proc) == port
    seen = processes.by_command_line(port)
    assert seen is not None and seen.process is not None and seen.process.pid == proc.pid, seen
    assert processes.api_port(["vllm", "serve", "--config", "vllm.yaml"], str(tmp_path)) == port
    assert processes.api_port(["vllm", "serve", "--config", str(tmp_path / "portless.yaml")]) == VLLM.default_port
    assert processes.api_port(["llama-server", "--config", str(tmp_path / "vllm.yaml")]) == LLAMA_CPP.default_port
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert processes.api_port(["vllm", "serve", "--config", str(fifo)]) is None  # never opened


def _found(port: int) -> int | None:
    """The pid the host's witness finds serving `port`."""
    seen = processes.by_command_line(port)
    return seen.process.pid if seen is not None and seen.process is not None else None


def _sleeper(spawn: Spawn, *args: str) -> int:
    """A look-alike llama-server on a free port, `args` last (a flag with no value is the command line's end)."""
    port = free_port()
    proc = spawn("-m", "m.gguf", "--port", str(port), *args)
    assert _found(port) == proc.pid
    return port


def test_idle_sleep_is_read_from_the_servers_command_line(spawn, tmp_path: Path):
    port = _sleeper(spawn, "--sleep-idle-seconds", "30")
    assert idle_sleep(f"http://127.0.0.1:{port}", Options()) == 30.0
    assert idle_sleep(f"http://localhost:{port}/", Options()) == 30.0
    assert idle_sleep(f"http://127.0.0.1:{free_port()}", Options(server_port=port)) == 30.0  # behind a proxy
    (tmp_path / "pid").write_text(f"{_found(port)}\n")
    assert idle_sleep(f"http://127.0.0.1:{free_port()}", Options(pid_file=str(tmp_path / "pid"))) == 30.0


@pytest.mark.parametrize("args", [(), ("--sleep-idle-seconds", "-1"), ("--sleep-idle-seconds", "0"),
                                  ("--sleep-idle-seconds", "soon"), ("--sleep-idle-seconds", "inf"),
                                  ("--sleep-idle-seconds",)])
def test_a_server_that_does_not_sleep_has_no_idle_sleep(spawn, args):
    port = _sleeper(spawn, *args)  # found, yet it does not sleep
    assert idle_sleep(f"http://127.0.0.1:{port}", Options()) is None


def test_idle_sleep_is_none_for_another_hosts_url_or_no_process(spawn):
    port = _sleeper(spawn, "--sleep-idle-seconds", "30")
    assert idle_sleep(f"http://127.0.0.1:{port}", Options()) == 30.0  # the same server, from this host
    assert idle_sleep(f"http://192.0.2.10:{port}", Options()) is None  # TEST-NET-1: never a local process
    assert idle_sleep(f"http://127.0.0.1:{free_port()}", Options()) is None
    assert idle_sleep(f"http://127.0.0.1:{port}", Options(server_user="no-such-user")) is None
    assert idle_sleep("not a url", Options()) is None
    assert idle_sleep(f"http://127.0.0.1:{port}", Options(pid_command="exit 3")) is None


def test_idle_sleep_is_read_only_from_a_row_with_a_sleep_flag(spawn):
    """vLLM has no sleep flag: its command line is not read for llama.cpp's."""
    port = free_port()
    proc = spawn("vllm", "serve", "m", "--port", str(port), "--sleep-idle-seconds", "30", llama=False)
    assert _found(port) == proc.pid
    assert idle_sleep(f"http://127.0.0.1:{port}", Options()) is None
