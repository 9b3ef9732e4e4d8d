"""A real supervisord (Debian's supervisor 4.2.5) running the real vLLM, started by the test.

The [program:vllm] block is the shipped contrib/supervisor/vllm.conf with only what must differ on a
test machine changed: the interpreter and server flags (the vLLM venv, the tiny local model, a free
port, --max-num-seqs 2 and the CPU flags), the log file, the user (the test runs as root and the
venv lives under /root) and the CPU-build environment. Every process-control setting
(autorestart=false, startretries, startsecs, stopwaitsecs, stopasgroup, killasgroup) is the shipped
one, and the autogroup wrapper of the command is kept verbatim.

supervisord runs with `nodaemon`, its own config, socket, pid file and logs in a temp dir, in its own
session (as init would start it), so the autogroup the program joins is supervisord's own.
"""

from __future__ import annotations

import configparser
import http.client
import os
import shlex
import signal
import socket
import subprocess
import time
import xmlrpc.client
from pathlib import Path

from tests.rig.vllm_server import SERVED_MODEL_NAME, SERVER_ENV, group_members, proc_cmdline, proc_comm

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "contrib" / "supervisor" / "vllm.conf"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SHIPPED_PYTHON = "/opt/vllm/bin/python"


class SupervisorError(RuntimeError):
    pass


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"({path}: {err.strerror})"


def shipped_program() -> dict[str, str]:
    """The [program:vllm] settings of contrib/supervisor/vllm.conf (as supervisord reads them)."""
    cp = configparser.RawConfigParser(inline_comment_prefixes=(";",))
    cp.read_string(SHIPPED.read_text())
    return {k: " ".join(v.split("\n")).strip() for k, v in cp.items("program:vllm")}


def program_block(venv: Path, model_dir: Path, port: int, log: Path) -> tuple[str, dict[str, str]]:
    prog = shipped_program()
    command = prog["command"]
    if f"{SHIPPED_PYTHON} -m {SERVER_MODULE}" not in command:
        raise SupervisorError(f"{SHIPPED}: command does not run {SHIPPED_PYTHON} -m {SERVER_MODULE}: {command}")
    wrapper = command.split(SHIPPED_PYTHON, 1)[0].strip()
    flags = ["--model", str(model_dir), "--served-model-name", SERVED_MODEL_NAME, "--host", "127.0.0.1",
             "--port", str(port), "--max-num-seqs", "2", "--max-model-len", "2048", "--dtype", "float32",
             "--enforce-eager"]
    prog["command"] = " ".join([wrapper, shlex.quote(str(venv / "bin" / "python")), "-m", SERVER_MODULE,
                                *map(shlex.quote, flags)])
    prog.pop("user", None)
    prog["stdout_logfile"] = str(log)
    env = dict(kv.split("=", 1) for kv in _split_env(prog.get("environment", "")))
    env.update({k: f'"{v}"' for k, v in SERVER_ENV.items()})
    env["VIRTUAL_ENV"] = f'"{venv}"'
    env["PATH"] = f'"{venv / "bin"}:/usr/sbin:/usr/bin:/sbin:/bin"'
    prog["environment"] = ",".join(f"{k}={v}" for k, v in env.items())
    body = "\n".join(f"{k}={v.replace('%', '%%') if k == 'command' else v}" for k, v in prog.items())
    return f"[program:vllm]\n{body}\n", prog


def _split_env(raw: str) -> list[str]:
    return [kv.strip() for kv in raw.split(",") if "=" in kv]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class _UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: str, timeout: float = 5.0) -> None:
        super().__init__()
        self.path, self.timeout = path, timeout

    def make_connection(self, host):  # noqa: ARG002 - the socket path is the address
        return _UnixConnection(self.path, self.timeout)


class Supervisord:
    def __init__(self, root: Path, venv: Path, model_dir: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        root.mkdir(parents=True, exist_ok=True)
        (root / "childlogs").mkdir(exist_ok=True)
        self.sock = root / "supervisor.sock"
        self.log = root / "supervisord.log"
        self.vllm_log = root / "vllm.log"
        self.conf = root / "supervisord.conf"
        self.program_conf = root / "vllm.conf"
        block, self.program = program_block(venv, model_dir, port, self.vllm_log)
        self.program_conf.write_text(f"; generated from {SHIPPED}\n{block}")
        # The main file is Debian's /etc/supervisor/supervisord.conf with the test's paths, plus nodaemon.
        self.conf.write_text(f"""\
[unix_http_server]
file={self.sock}
chmod=0700

[supervisord]
nodaemon=true
logfile={self.log}
pidfile={root / "supervisord.pid"}
childlogdir={root / "childlogs"}
loglevel=info

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{self.sock}

[include]
files = {self.program_conf}
""")
        self.proc: subprocess.Popen | None = None
        self.start_time = time.time()
        self.stdout = root / "supervisord.stdout"
        self.pgids: set[int] = set()   # every vLLM process group supervisord started (for the final sweep)
        self.rpc = xmlrpc.client.ServerProxy("http://localhost", transport=_UnixTransport(str(self.sock)))

    def ctl_argv(self, *args: str) -> list[str]:
        return ["/usr/bin/supervisorctl", "-c", str(self.conf), *args]

    def ctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.ctl_argv(*args), capture_output=True, text=True, timeout=timeout)

    def start(self) -> None:
        self.start_time = time.time()
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTEST_ADDOPTS", "VIRTUAL_ENV")}
        self.proc = subprocess.Popen(["/usr/bin/supervisord", "-c", str(self.conf)], env=env,
                                     stdin=subprocess.DEVNULL, stdout=open(self.stdout, "wb"),
                                     stderr=subprocess.STDOUT, cwd=str(self.root), start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise SupervisorError(f"supervisord exited with {self.proc.returncode}:\n{_tail(self.stdout)}\n"
                                      f"{_tail(self.log)}")
            try:
                if self.info()["statename"] in ("STARTING", "RUNNING"):
                    break
            except (OSError, xmlrpc.client.Error):
                pass
            if time.monotonic() > deadline:
                raise SupervisorError(f"supervisord did not answer on {self.sock}:\n{_tail(self.log)}")
            time.sleep(0.2)
        self.note_pid()

    def info(self) -> dict:
        return self.rpc.supervisor.getProcessInfo("vllm")

    def pid(self) -> int:
        """The API server's pid while supervisord has it running, else 0."""
        try:
            return int(self.info()["pid"])
        except (OSError, xmlrpc.client.Error):
            return 0

    def note_pid(self) -> int:
        pid = self.pid()
        if pid:
            self.pgids.add(pid)  # the program is its process group's leader (supervisord's setpgrp)
        return pid

    def engine_core_pid(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pgid = self.note_pid()
            if pgid:
                for p in group_members(pgid):
                    if "EngineCore" in proc_comm(p) or "EngineCore" in proc_cmdline(p):
                        return p
            if time.monotonic() > deadline:
                raise SupervisorError(f"no VLLM::EngineCore in the group of {pgid}")
            time.sleep(0.2)

    def survivors(self) -> list[int]:
        return sorted(p for g in self.pgids for p in group_members(g))

    def wait_healthy(self, timeout: float = 240.0) -> float:
        import httpx
        t0 = time.monotonic()
        with httpx.Client(timeout=2.0) as c:
            while True:
                try:
                    if c.get(self.url + "/health").status_code == 200:
                        self.note_pid()
                        return time.monotonic() - t0
                except httpx.HTTPError:
                    pass
                if self.info()["statename"] not in ("STARTING", "RUNNING"):
                    raise SupervisorError(f"vllm is {self.info()['statename']} under supervisord:\n"
                                          f"{_tail(self.vllm_log)}\n{_tail(self.log)}")
                if time.monotonic() - t0 > timeout:
                    raise SupervisorError(f"vLLM /health not 200 within {timeout:g} s:\n{_tail(self.vllm_log)}")
                time.sleep(0.5)

    def stop(self) -> list[int]:
        """Stop supervisord (it stops vllm as a group first); SIGKILL whatever of vLLM is left.
        Returns the processes that had to be killed by hand (none when killasgroup did its job)."""
        for g in list(self.pgids):  # a SIGSTOPped engine must be able to die of SIGTERM
            try:
                os.killpg(g, signal.SIGCONT)
            except OSError:
                pass
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        left = self.survivors()
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while self.survivors() and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def log_lines(self) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []
