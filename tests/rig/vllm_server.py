"""Harness for a REAL vLLM server (CPU build) used by the real_vllm test tier.

Imported by pytest running in the project's Python (NOT the vLLM venv): only stdlib + httpx here.
The server itself runs from the vLLM venv created by `.ci/vllm-env.sh`.

    srv = VllmServer(venv, model_dir, port, log_path=...)
    srv.start()                      # waits for /health 200, raises with the log tail otherwise
    load = srv.load(4, max_tokens=1500)
    srv.counter("vllm:num_requests_running")
    os.kill(srv.engine_core_pid(), signal.SIGSTOP)
    ...
    load.stop(); srv.stop()

Start-up follows /work/shared/REAL-COMPONENTS.md: the module entry point (`vllm serve` is broken in this
distribution), and its own session + autogroup at nice 19 set FROM INSIDE the new session, so the
busy-polling engine cannot starve the tests (and the check under test) on a 2-core machine.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import httpx

from tests.rig.ports import free_port  # noqa: F401  (re-exported: one owner, tests/rig)

SERVED_MODEL_NAME = "tiny-llama"
AUTOGROUP_SH = 'echo 19 > /proc/self/autogroup && exec "$@"'
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}


class VllmStartError(RuntimeError):
    """The server did not become healthy; the message carries the log tail."""


# --------------------------------------------------------------------------- /proc helpers

def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the comm (which may contain spaces and parentheses)."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw:
        return None
    return raw[raw.rfind(")") + 2:].split()


def proc_ppid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def proc_state(pid: int) -> str | None:
    """Single-letter state: R, S, T (stopped), Z, ..."""
    f = _stat_fields(pid)
    return f[0] if f else None


def proc_comm(pid: int) -> str:
    return _read(f"/proc/{pid}/comm").strip()


def proc_cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()


def group_members(pgid: int) -> list[int]:
    """Live processes in process group `pgid`, including orphans whose parent (the leader) died."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat_fields(int(entry))
            if f and f[0] != "Z" and int(f[2]) == pgid:
                out.append(int(entry))
    return out


def descendants(root: int) -> list[int]:
    """All live descendants of `root` (breadth first), from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        ppid = proc_ppid(int(entry))
        if ppid is not None:
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    state = proc_state(pid)
    return state is not None and state != "Z"


# --------------------------------------------------------------------------- /metrics parsing

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Minimal Prometheus text parser: (name, labels, value) for every sample line."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in _LABEL_RE.findall(m.group(2) or "")}
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


def sample_sum(text: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """Sum of all samples named `name` whose labels include `labels`; None when there is none."""
    want = dict(labels or {})
    found = [v for n, lab, v in parse_samples(text)
             if n == name and all(lab.get(k) == val for k, val in want.items())]
    return sum(found) if found else None


def saturated(text: str) -> bool:
    """Both slots (--max-num-seqs 2) taken and at least one request queued."""
    return (sample_sum(text, "vllm:num_requests_running") == 2
            and (sample_sum(text, "vllm:num_requests_waiting") or 0) >= 1)


def idle(text: str) -> bool:
    return (sample_sum(text, "vllm:num_requests_running") == 0
            and sample_sum(text, "vllm:num_requests_waiting") == 0)


# --------------------------------------------------------------------------- load generator

class Load:
    """n concurrent long generations in background threads; `stop()` aborts them by shutting down
    their sockets (works even while the engine is SIGSTOPped), `join()` waits for them to finish."""

    def __init__(self, base_url: str, n: int, max_tokens: int, ignore_eos: bool = True,
                 prompt: str = "Hello, please tell me a long story about servers and queues.",
                 model: str = SERVED_MODEL_NAME, timeout: float = 600.0, repeat: bool = False,
                 api_key: str | None = None):
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}  # a server started with --api-key
        self.repeat = repeat              # each thread sends a new generation when one ends, until stop()
        self.n = n
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.prompt = prompt
        self.model = model
        self.timeout = timeout
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._streams: list = []          # httpcore network streams (to shut down on stop)
        self.chunks = [0] * n             # SSE data chunks (~ tokens) received per thread
        self.finished = [0] * n           # generations answered completely ([DONE]) per thread
        self.errors: list[str | None] = [None] * n
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                         name=f"vllm-load-{i}") for i in range(n)]
        for t in self.threads:
            t.start()

    def _trace(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            with self._lock:
                self._streams.append(stream)
            if self._stop.is_set():
                self._shutdown(stream)

    @staticmethod
    def _shutdown(stream) -> None:
        try:
            sock = stream.get_extra_info("socket")
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except Exception:  # noqa: BLE001 - best effort
            pass

    def _run(self, i: int) -> None:
        body = {"model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens,
                "temperature": 0.0, "ignore_eos": self.ignore_eos, "stream": True}
        try:
            with httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(self.timeout, connect=10.0),
                              headers=self.headers) as c:
                while not self._stop.is_set():
                    if not self._one(c, i, body) or not self.repeat:
                        return
        except Exception as exc:  # noqa: BLE001 - recorded for the test to inspect
            if not self._stop.is_set():
                self.errors[i] = f"{type(exc).__name__}: {exc}"

    def _one(self, c: httpx.Client, i: int, body: dict) -> bool:
        with c.stream("POST", "/v1/completions", json=body, extensions={"trace": self._trace}) as resp:
            if resp.status_code != 200:
                resp.read()
                self.errors[i] = f"HTTP {resp.status_code}: {resp.text[:300]}"
                return False
            for line in resp.iter_lines():
                if self._stop.is_set():
                    return False
                if line.startswith("data:"):
                    if line.strip() == "data: [DONE]":
                        self.finished[i] += 1
                    else:
                        self.chunks[i] += 1
        return True

    def alive(self) -> int:
        return sum(t.is_alive() for t in self.threads)

    def stop(self, timeout: float = 10.0) -> None:
        """Abort all generations (the server sees the clients disconnect and aborts them)."""
        self._stop.set()
        with self._lock:
            streams = list(self._streams)
        for s in streams:
            self._shutdown(s)
        self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self.threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.alive() == 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# --------------------------------------------------------------------------- the server

class VllmServer:
    def __init__(self, venv: str | os.PathLike, model_dir: str | os.PathLike, port: int | None = None,
                 max_num_seqs: int = 2, log_path: str | os.PathLike | None = None,
                 served_model_name: str = SERVED_MODEL_NAME, extra_args: Iterable[str] = (),
                 host: str = "127.0.0.1", extra_env: Mapping[str, str] | None = None,
                 config_file: str | os.PathLike | None = None):
        """`config_file`: start `--config FILE` with the host and port only in that YAML (vLLM's --config)."""
        self.venv = Path(venv)
        self.python = self.venv / "bin" / "python"
        self.model_dir = Path(model_dir)
        self.host = host
        self.port = port or free_port(host)
        self.max_num_seqs = max_num_seqs
        self.served_model_name = served_model_name
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env or {})
        self.config_file = Path(config_file) if config_file else None
        self.log_path = Path(log_path) if log_path else Path(f"/tmp/vllm-server-{self.port}.log")
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self.start_seconds: float | None = None    # last measured start-up time
        self._atexit_registered = False

    # -- basics
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        where = ["--host", self.host, "--port", str(self.port)]
        if self.config_file is not None:
            self.config_file.write_text(f"host: {self.host}\nport: {self.port}\n")
            where = ["--config", str(self.config_file)]
        return [
            "setsid", "sh", "-c", AUTOGROUP_SH, "sh",
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name,
            *where,
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-model-len", "2048",
            "--dtype", "float32",
            "--enforce-eager",
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTEST_ADDOPTS")}
        env.update(SERVER_ENV)
        env.update(self.extra_env)
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- lifecycle
    def start(self, timeout: float = 240.0, wait: bool = True) -> VllmServer:
        """Start it; with `wait`, return once /health answers 200 (else at once: it loads)."""
        if self.proc and self.proc.poll() is None:
            raise RuntimeError(f"vLLM server already running (pid {self.proc.pid})")
        if not self.python.exists():
            raise VllmStartError(f"no vLLM venv at {self.venv} (run .ci/vllm-env.sh)")
        if not (self.model_dir / "config.json").exists():
            raise VllmStartError(f"no model at {self.model_dir} (run make_tiny_model.py)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(f"\n===== {time.strftime('%F %T')} starting: {' '.join(self.command())}\n".encode())
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.command(), env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT, cwd="/")
        if not wait:
            return self
        try:
            self._wait_healthy(t0 + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _wait_healthy(self, deadline: float) -> None:
        last = "no answer yet"
        with httpx.Client(timeout=2.0) as c:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    raise VllmStartError(f"vLLM server exited with code {rc} during start-up; "
                                         f"log {self.log_path}, tail:\n{self.log_tail()}")
                try:
                    r = c.get(self.url + "/health")
                    if r.status_code == 200:
                        return
                    last = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}"
                if time.monotonic() > deadline:
                    raise VllmStartError(f"vLLM /health not 200 before timeout (last: {last}); "
                                         f"log {self.log_path}, tail:\n{self.log_tail()}")
                time.sleep(0.5)

    def all_pids(self) -> list[int]:
        """The API server and every descendant (EngineCore, Worker, ...), live ones only."""
        if not self.proc:
            return []
        pids = [self.proc.pid] if _alive(self.proc.pid) else []
        return pids + [p for p in descendants(self.proc.pid) if _alive(p)]

    def engine_core_pid(self, timeout: float = 10.0) -> int:
        """PID of the `VLLM::EngineCore` child of the API server."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc:
                for pid in descendants(self.proc.pid):
                    if "EngineCore" in proc_comm(pid) or "EngineCore" in proc_cmdline(pid):
                        return pid
            if time.monotonic() > deadline:
                raise RuntimeError(f"no VLLM::EngineCore process under pid {self.pid}: "
                                   f"{[(p, proc_comm(p)) for p in self.all_pids()]}")
            time.sleep(0.2)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the whole process group (SIGCONT too, in case the engine is SIGSTOPped), SIGKILL
        after `grace` seconds, and make sure no child (even one that left the group) survives."""
        proc = self.proc
        if proc is None:
            return
        pgid = proc.pid  # setsid made the server its own session and group leader
        # group_members: when the API server died first (SIGKILLed engine), its orphans (VLLM::Worker,
        # a multiprocessing helper) are no longer its descendants but are still in its group.
        tracked = set(self.all_pids()) | set(group_members(pgid))

        def signal_all(sig: int) -> None:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            for p in list(tracked):
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    tracked.discard(p)

        if proc.poll() is None or tracked:
            signal_all(signal.SIGTERM)
            signal_all(signal.SIGCONT)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                tracked |= set(descendants(pgid)) if _alive(pgid) else set()
                proc.poll()
                if not any(_alive(p) for p in tracked | {pgid}):
                    break
                time.sleep(0.2)
            else:
                signal_all(signal.SIGKILL)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                signal_all(signal.SIGKILL)
                proc.wait(10)
            # last sweep: anything still in the group or tracked gets SIGKILL
            end = time.monotonic() + 10
            while any(_alive(p) for p in tracked) and time.monotonic() < end:
                signal_all(signal.SIGKILL)
                time.sleep(0.2)
            survivors = [p for p in tracked if _alive(p)]
            if survivors:
                raise RuntimeError(f"vLLM processes survived stop(): {survivors}")
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        self.proc = None

    def restart(self, timeout: float = 240.0) -> VllmServer:
        self.stop()
        return self.start(timeout=timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- HTTP helpers
    def get(self, path: str, timeout: float = 10.0) -> httpx.Response:
        return httpx.get(self.url + path, timeout=timeout)

    def metrics_text(self, timeout: float = 10.0) -> str:
        r = self.get("/metrics", timeout=timeout)
        r.raise_for_status()
        return r.text

    def counter(self, name: str, labels: Mapping[str, str] | None = None,
                text: str | None = None) -> float | None:
        """Sum of the samples `name` (matching `labels`) in /metrics (or in `text`)."""
        return sample_sum(self.metrics_text() if text is None else text, name, labels)

    def completion(self, prompt: str = "Hello", max_tokens: int = 1, timeout: float = 60.0,
                   headers: dict[str, str] | None = None, **extra) -> dict:
        body = {"model": self.served_model_name, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0.0, **extra}
        r = httpx.post(self.url + "/v1/completions", json=body, timeout=timeout, headers=headers)
        r.raise_for_status()
        return r.json()

    def load(self, n: int, max_tokens: int, ignore_eos: bool = True, **kw) -> Load:
        return Load(self.url, n, max_tokens, ignore_eos=ignore_eos, model=self.served_model_name, **kw)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 60.0,
                 interval: float = 0.5) -> str:
        """Poll /metrics until predicate(text) is true; returns that text (raises on timeout)."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.metrics_text()
            if predicate(text):
                return text
            time.sleep(interval)
        raise TimeoutError(f"/metrics condition not met within {timeout}s; last page excerpt:\n"
                           + "\n".join(ln for ln in text.splitlines() if ln.startswith("vllm:num_req")))


def neutralize(text: str, model_dir: str | os.PathLike, name: str = SERVED_MODEL_NAME) -> str:
    """Replace the local model path with the neutral model name (for recorded fixtures)."""
    return text.replace(str(model_dir), name)


# --------------------------------------------------------------------------- environment set-up

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
VLLM_ENV_SCRIPT = REPO_ROOT / ".ci" / "vllm-env.sh"
MAKE_MODEL_SCRIPT = HERE / "make_tiny_model.py"
CACHE_DIR = Path(os.environ.get("CHECK_VLLM_CACHE", Path.home() / ".cache" / "check_vllm"))


class VllmSetupError(RuntimeError):
    """The vLLM venv or the tiny model could not be prepared."""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def ensure_venv(timeout: float = 1800.0) -> Path:
    """Run .ci/vllm-env.sh (fast when the cached venv is fine) and return the venv path."""
    try:
        r = subprocess.run(["bash", str(VLLM_ENV_SCRIPT)], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise VllmSetupError(f"{VLLM_ENV_SCRIPT} did not finish within {timeout}s") from exc
    if r.returncode != 0 or not r.stdout.strip():
        raise VllmSetupError(f"{VLLM_ENV_SCRIPT} failed (exit {r.returncode}); cannot install vLLM:\n"
                             f"{_tail(r.stdout)}\n{_tail(r.stderr)}")
    venv = Path(r.stdout.strip().splitlines()[-1])
    if not (venv / "bin" / "python").exists():
        raise VllmSetupError(f"{VLLM_ENV_SCRIPT} reported venv {venv}, which has no bin/python")
    return venv


def tiny_model_dir(cache_dir: Path = CACHE_DIR) -> Path:
    """Cache location, keyed by a hash of the generator so edits to it produce a new model."""
    import hashlib
    digest = hashlib.sha256(MAKE_MODEL_SCRIPT.read_bytes()).hexdigest()[:12]
    return cache_dir / f"tiny-llama-{digest}"


def ensure_tiny_model(venv: Path, cache_dir: Path = CACHE_DIR, timeout: float = 300.0) -> Path:
    """Generate the tiny model (with the venv's python, offline) unless the cache already holds it."""
    target = tiny_model_dir(cache_dir)
    if (target / "model.safetensors").exists() and (target / "tokenizer_config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("PYTHONPATH", None)
    try:
        r = subprocess.run([str(venv / "bin" / "python"), str(MAKE_MODEL_SCRIPT), str(tmp)],
                           capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise VllmSetupError(f"make_tiny_model.py did not finish within {timeout}s") from exc
    if r.returncode != 0:
        subprocess.run(["rm", "-rf", str(tmp)])
        raise VllmSetupError(f"make_tiny_model.py failed (exit {r.returncode}):\n"
                             f"{_tail(r.stdout)}\n{_tail(r.stderr)}")
    try:
        os.rename(tmp, target)
    except OSError:  # another session won the race
        subprocess.run(["rm", "-rf", str(tmp)])
    return target
