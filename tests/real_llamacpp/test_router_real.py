"""llama.cpp's router mode against a REAL router (b11434): `llama-server --models-dir DIR` with no `-m` runs one
router and a child llama-server per model, started on demand (tools/server/server-models.cpp). Two models (the tier's
tiny GGUF twice, as alpha.gguf and beta.gguf: common/preset.cpp load_from_models_dir names a model by its file),
one loaded by POST /models/load. The check reads the loaded one (idle, its probe answered) and never loads the other:
the router's own listing says beta is still unloaded after every run, and its log never proxied a request to beta.

The stuck case: the loaded child's main thread (every llama_decode()) stopped while two endless generations run on
it: the child's page through the router shows its decode counter frozen with work (stalling, then stuck), or the
page waits on the stopped thread (unresponsive, CRITICAL once it lasts): CRITICAL either way, beta never loaded.

What the check sent is recorded by the tier's forwarder (tests/rig/forwarder.py): every read of a model and the
probe carry autoload=false.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.real_llamacpp.conftest import REPORTS
from tests.rig.forwarder import Recorder
from tests.rig.llamacpp_server import FLAGS, LlamaServer, LlamaSetupError, _ptrace, thread_state
from tests.rig.scripts import Result, real_runner
from tests.rig.vllm_server import AUTOGROUP_SH, Load

pytestmark = pytest.mark.real_llamacpp

FAST = ("--min-gap", "0.5", "--reread-delay", "1", "-v")
STUCK = ("--stuck-seconds", "2", "--stuck-readings", "2", "-t", "8")
#: PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH (as tests/rig/llamacpp_server.py stops a server's main thread).
_SEIZE, _INTERRUPT, _DETACH = 0x4206, 0x4207, 17


class RouterServer(LlamaServer):
    """The tier's llama-server in router mode: --models-dir `models` and no -m, the tier's flags (each child gets the
    router's: server-models.cpp merges them into every model's preset); LLAMA_CACHE an empty directory, so that no
    model of this host's Hugging Face cache is listed."""

    def __init__(self, binary: Path, models: Path, cache: Path, log_path: Path) -> None:
        super().__init__(binary, models, log_path=log_path)
        self.models, self.cache = models, cache
        self.stopped: list[int] = []

    def command(self) -> list[str]:
        return ["setsid", "env", f"LLAMA_CACHE={self.cache}", "sh", "-c", AUTOGROUP_SH, "llama-server",
                str(self.binary), "--models-dir", str(self.models), "--host", "127.0.0.1", "--port", str(self.port),
                *FLAGS]

    def states(self) -> dict[str, str]:
        """The router's own word on each model (GET /models: status.value)."""
        return {m["id"]: m["status"]["value"] for m in self.get("/models", timeout=5).json()["data"]}

    def load_model(self, name: str, timeout: float = 60.0) -> None:
        r = httpx.post(self.url + "/models/load", json={"model": name}, timeout=10)
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + timeout
        while self.states().get(name) != "loaded":
            assert time.monotonic() < deadline, (self.states(), self.log_tail())
            time.sleep(0.2)

    def children(self) -> dict[str, int]:
        """The router's child processes by the model they serve (their command line's --alias)."""
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == self.pid and b"--alias" in argv:
                out[argv[argv.index(b"--alias") + 1].decode()] = int(entry)
        return out

    def stop_child_decode(self, name: str) -> int:
        """Stop only the main thread of the child serving `name` (every llama_decode()); its HTTP threads go on."""
        pid = self.children()[name]
        _ptrace(_SEIZE, pid)
        _ptrace(_INTERRUPT, pid)
        self.stopped.append(pid)
        deadline = time.monotonic() + 5
        while thread_state(pid) not in ("t", "T") and time.monotonic() < deadline:
            time.sleep(0.01)
        return pid

    def resume_children(self) -> None:
        for pid in self.stopped:
            with contextlib.suppress(OSError):
                _ptrace(_DETACH, pid)
        self.stopped = []

    def stop(self) -> None:
        """The router asks its children to exit on SIGTERM; any child left is killed by its own pid."""
        self.resume_children()
        children = list(self.children().values()) if self.proc is not None and self.proc.poll() is None else []
        with contextlib.suppress(ProcessLookupError, OSError):
            if self.proc is not None and self.proc.poll() is None:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(20)
        super().stop()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def proxied(self) -> list[str]:
        """The models the router proxied a request to, from its log (server-models.cpp proxy_request)."""
        marker = "proxying request to model "
        return [line.split(marker, 1)[1].split()[0] for line in self.log_tail(100_000).splitlines() if marker in line]


@pytest.fixture
def router(built, heavy, tmp_path: Path) -> Iterator[RouterServer]:
    binary, gguf = built
    models, cache = tmp_path / "models", tmp_path / "llama-cache"
    models.mkdir()
    cache.mkdir()
    for name in ("alpha", "beta"):
        (models / f"{name}.gguf").symlink_to(gguf)
    srv = RouterServer(binary, models, cache, tmp_path / "router.log")
    try:
        srv.start()
    except LlamaSetupError as exc:
        pytest.fail(f"real llama.cpp tier (router mode): {exc}", pytrace=False)
    try:
        yield srv
    finally:
        srv.stop()


def _carried_autoload_false(rec: Recorder) -> None:
    """Every request of the check that names a model (a read, /props, the probe) says autoload=false."""
    for method, path in rec.seen:
        split = urlsplit(path)
        if method == "POST" or "model" in parse_qs(split.query):
            assert parse_qs(split.query).get("autoload") == ["false"], (method, path, rec.seen)


def _timeline(seen: list[tuple[float, Result]]) -> str:
    return "\n".join(f"{t:5.1f} s  {r.first}" for t, r in seen)


def test_router_reads_the_loaded_model_and_never_loads_the_other(router: RouterServer, tmp_path: Path):
    page = router.get("/metrics")
    assert page.status_code == 400 and page.json()["error"]["message"] == "model name is missing from the request"
    assert router.states() == {"alpha": "unloaded", "beta": "unloaded"}
    rec = Recorder(router.url)
    run: Callable[..., Result] = real_runner(tmp_path / "state")
    args = (*FAST, *STUCK, "--server-port", str(router.port))
    try:
        r = run(rec.url, *args)  # nothing loaded: the router answers, the check loads nothing
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert "llama.cpp's router has no model loaded (2 unloaded), and the check loads none" in r.status, r.out
        assert router.states() == {"alpha": "unloaded", "beta": "unloaded"}
        router.load_model("alpha")
        seen: list[tuple[float, Result]] = []
        t0 = time.monotonic()
        for _ in range(4):
            time.sleep(0.6)
            seen.append((time.monotonic() - t0, run(rec.url, *args)))
            assert router.states() == {"alpha": "loaded", "beta": "unloaded"}, _timeline(seen)
        first = seen[0][1]
        assert (first.code, first.word) == (OK, "idle") and "probe answered" in first.status, _timeline(seen)
        assert all(r.code == OK and r.word == "idle" for _, r in seen), _timeline(seen)
        assert "engine alpha: idle" in first.out.splitlines(), first.out
        posts = rec.inference()
        assert posts and all(p == "/v1/completions?autoload=false" for _, p in posts), rec.seen
        _carried_autoload_false(rec)
        assert "beta" not in router.proxied() and set(router.proxied()) == {"alpha"}, router.proxied()
        assert not any("beta" in p for _, p in rec.seen), rec.seen
    finally:
        rec.close()
    REPORTS["router mode: alpha loaded, beta not"] = _timeline(seen) + f"\nthe router's /models after: {router.states()}"


def test_router_child_decode_stopped_is_critical_and_the_other_model_stays_unloaded(router: RouterServer,
                                                                                   tmp_path: Path):
    router.load_model("alpha")
    rec = Recorder(router.url)
    run = real_runner(tmp_path / "state")
    args = (*FAST, *STUCK, "--server-port", str(router.port))
    load = Load(router.url, 2, 100_000, ignore_eos=True, model="alpha", repeat=True)
    seen: list[tuple[float, Result]] = []
    try:
        deadline = time.monotonic() + 30
        while not any(load.chunks):
            assert time.monotonic() < deadline, ("no generation went through the router", router.log_tail())
            time.sleep(0.2)
        t0 = time.monotonic()
        seen.append((0.0, run(rec.url, *args)))
        time.sleep(0.6)
        seen.append((time.monotonic() - t0, run(rec.url, *args)))
        assert seen[-1][1].word == "busy", _timeline(seen)
        router.stop_child_decode("alpha")
        deadline = time.monotonic() + 60
        while seen[-1][1].code != CRITICAL:
            assert time.monotonic() < deadline, _timeline(seen)
            time.sleep(1.0)
            seen.append((time.monotonic() - t0, run(rec.url, *args)))
        last = seen[-1][1]
        assert last.word in ("stuck", "unresponsive"), _timeline(seen)
        assert not any(r.code == CRITICAL for _, r in seen[:2]), _timeline(seen)
        assert router.states()["beta"] == "unloaded", router.states()
        assert rec.inference() == [], "work in sight: no probe"
        _carried_autoload_false(rec)
        assert "beta" not in router.proxied(), router.proxied()
    finally:
        router.resume_children()
        load.stop()
        rec.close()
    REPORTS["router mode: alpha's decode thread stopped under load"] = _timeline(seen)
