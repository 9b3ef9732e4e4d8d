"""llama.cpp on its own terms, against a REAL llama-server (b11434, the tiny model as GGUF): its /metrics off
(HTTP 501 without `--metrics`) is `no metrics` naming the flag, never CRITICAL and never a restart; a server
started with `--sleep-idle-seconds` is let sleep (GET /props `is_sleeping`, its command line on this host: no
idle probe, asleep or awake); a server given its port by LLAMA_ARG_PORT (no --port) is found loading by the host's
witness through /proc/PID/environ: `starting`, never `down`.

What the server did is read from its own log (tools/server/server-queue.cpp logs `entering sleeping state` and
`exiting sleeping state`, server-context.cpp `processing task` for each slot's task) and from GET /props, which
llama.cpp answers from a cache while it sleeps (no task: asking it wakes nothing). What the check sent is recorded
by the tier's forwarder (tests/rig/forwarder.py), with --server-port naming the server's port behind it.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.real_llamacpp.conftest import REPORTS
from tests.rig.forwarder import Recorder
from tests.rig.held_start import HeldStart
from tests.rig.llamacpp_server import LlamaServer, LlamaSetupError
from tests.rig.scripts import Result, real_runner, run_script
from tests.rig.vllm_server import AUTOGROUP_SH, Load
from tests.rig.waiting import wait_for

pytestmark = pytest.mark.real_llamacpp

FAST = ("--min-gap", "0.5", "--reread-delay", "1")
STUCK = ("--stuck-seconds", "2", "--stuck-readings", "2", "-t", "4")
SLEEP_S = 3

#: tools/server/server-queue.cpp start_loop(): QUE_INF lines, once per sleep and once per wake.
ASLEEP_LINE = re.compile(r"que .*: entering sleeping state$", re.M)
WAKE_LINE = re.compile(r"que .*: exiting sleeping state$", re.M)
#: tools/server/server-context.cpp launch_slot_with_task(): SLT_INF, one per completion a slot takes.
TASK_LINE = re.compile(r"slot .*: id +\d+ \| task \d+ \| processing task", re.M)

Check = Callable[..., Result]


class Flagged(LlamaServer):
    """The tier's llama-server with these flags instead of the tier's; `port_env`: its port given by LLAMA_ARG_PORT
    in its environment, no --port (env(1) execs sh, which execs llama-server: the Popen pid is still the server's)."""

    def __init__(self, binary: Path, gguf: Path, flags: tuple[str, ...], log_path: Path, port_env: bool = False,
                 env: dict[str, str] | None = None):
        super().__init__(binary, gguf, log_path=log_path)
        self.flags, self.port_env, self.env = flags, port_env, env or {}

    def command(self) -> list[str]:
        where = [] if self.port_env else ["--port", str(self.port)]
        given = {**({"LLAMA_ARG_PORT": str(self.port)} if self.port_env else {}), **self.env}
        env = ["env", *(f"{k}={v}" for k, v in given.items())] if given else []
        return ["setsid", *env, "sh", "-c", AUTOGROUP_SH, "llama-server", str(self.binary), "-m", str(self.gguf),
                "--host", "127.0.0.1", *where, *self.flags]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_once(self, *counts: tuple[re.Pattern[str], int], timeout: float = 10.0) -> str:
        """The log once each (line, n) is in it n times: llama.cpp's logger writes from its own thread (common/log.cpp's
        worker), so an answered request's lines may land after its answer. Returns the log as it stands then (the
        callers assert the exact counts on it)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log()
            if all(len(line.findall(text)) >= n for line, n in counts) or time.monotonic() > deadline:
                return text
            time.sleep(0.1)

    def sleeping(self) -> bool:
        """GET /props's `is_sleeping` (answered from a cache while it sleeps: no task, wakes nothing)."""
        return self.get("/props", timeout=5).json()["is_sleeping"] is True


@pytest.fixture
def llama(built, heavy, tmp_path: Path) -> Iterator[Callable[..., Flagged]]:
    """`llama(flags, port_env=False, wait=True, env=None)`: one llama-server at a time, stopped whatever happens."""
    binary, gguf = built
    started: list[Flagged] = []

    def start(flags: tuple[str, ...], port_env: bool = False, wait: bool = True,
              env: dict[str, str] | None = None) -> Flagged:
        srv = Flagged(binary, gguf, flags, tmp_path / f"llama-server-{len(started)}.log", port_env, env)
        started.append(srv)
        try:
            srv.start(wait=wait)
        except LlamaSetupError as exc:
            pytest.fail(f"real llama.cpp tier: {exc}", pytrace=False)
        return srv

    try:
        yield start
    finally:
        for srv in started:
            srv.stop()


@pytest.fixture
def check(tmp_path: Path) -> Check:
    return real_runner(tmp_path / "state")


def timeline(seen: list[tuple[float, Result]], extra: list[str] | None = None) -> str:
    return "\n".join(f"{t:5.1f} s  {r.first}" + (f"  [{extra[i]}]" if extra else "") for i, (t, r) in enumerate(seen))


def handler(state_dir: Path, url: str, state: str) -> str:
    """What check_vllm_restart decides on the check's saved verdict (--dry-run: it logs, it runs nothing)."""
    r = run_script("check_vllm_restart", "--state", state, "--state-type", "HARD", "--url", url,
                   "--state-dir", str(state_dir), "--dry-run", "--", "true")
    return (r.out + r.err).strip()


def test_metrics_off_is_no_metrics_naming_the_flag_never_critical_never_restarted(llama, tmp_path: Path):
    srv = llama(("--parallel", "2"))
    page = srv.get("/metrics")
    assert page.status_code == 501 and "--metrics" in page.json()["error"]["message"], page.text
    kept: list[str] = []
    # auto: its 501 names llama.cpp's flag, so the status line names llama.cpp too
    for engine, label in ((), "LLAMACPP"), (("--engine", "llamacpp"), "LLAMACPP"):
        state = tmp_path / f"state-{label}"
        run = real_runner(state)
        seen: list[tuple[float, Result]] = []
        t0 = time.monotonic()
        for _ in range(5):
            began = time.monotonic()
            seen.append((began - t0, run(srv.url, *FAST, *STUCK, *engine)))
            time.sleep(max(1.0 - (time.monotonic() - began), 0.0))
        shown = timeline(seen)
        for _, r in seen:
            assert r.code == WARNING and r.word == "no metrics", shown
            assert r.first.startswith(f"{label} WARNING - no metrics: /metrics answered HTTP 501 "
                                      "(llama.cpp serves it only with --metrics)"), shown
        decisions = {s: handler(state, srv.url, s) for s in ("WARNING", "CRITICAL")}
        for s, said in decisions.items():
            assert "no restart" in said and "would restart" not in said, (s, said)
        assert "last verdict is 'no metrics'" in decisions["CRITICAL"], decisions
        kept += [f"--engine {engine[1] if engine else 'auto'}:", shown,
                 *(f"check_vllm_restart --state {s} --state-type HARD --dry-run: {said}" for s, said in decisions.items())]
    REPORTS["metrics off (no --metrics)"] = "\n".join(kept)


def test_sleep_idle_seconds_is_let_sleep_no_probe_no_wake(llama, tmp_path: Path):
    srv = llama(("--metrics", "--parallel", "2", "--sleep-idle-seconds", str(SLEEP_S)))
    rec = Recorder(srv.url)
    run = real_runner(tmp_path / "state")
    # through the forwarder, its port is the forwarder's: --server-port names the server's, for the witness
    args = (*FAST, *STUCK, "--engine", "llamacpp", "--server-port", str(srv.port))
    seen: list[tuple[float, Result]] = []
    props: list[str] = []
    t0 = time.monotonic()

    fell_asleep: list[float] = []  # when GET /props, polled between the runs, first said is_sleeping true

    def every_2s(until: Callable[[Result], bool], timeout: float) -> None:
        began_loop = time.monotonic()
        while True:
            began = time.monotonic()
            r = run(rec.url, *args)
            seen.append((began - t0, r))
            sleeping = srv.sleeping()
            props.append(f"is_sleeping {sleeping}")
            if sleeping and not fell_asleep:
                fell_asleep.append(time.monotonic())
            assert r.code == OK and r.word == "idle", timeline(seen, props)
            if until(r) or time.monotonic() - began_loop > timeout:
                return
            while time.monotonic() - began < 2.0:
                if not fell_asleep and srv.sleeping():
                    fell_asleep.append(time.monotonic())
                time.sleep(0.2)

    try:
        every_2s(lambda r: False, 20)
        loop_log = srv.log_once((ASLEEP_LINE, 1))
        first = timeline(seen, props)
        assert rec.inference() == [], (rec.seen, first)
        assert len(TASK_LINE.findall(loop_log)) == 0, "no completion reached the server"
        assert len(WAKE_LINE.findall(loop_log)) == 0, ("the check woke it", first)
        assert len(ASLEEP_LINE.findall(loop_log)) == 1, first
        assert any(p == "is_sleeping True" for p in props), first
        asleep = [r for _, r in seen if "asleep" in r.status]
        assert asleep and all(r.first.startswith("LLAMACPP OK - idle: asleep: ") and "not probed" in r.status
                              for r in asleep), first
        awake = [r for _, r in seen if "asleep" not in r.status]
        for r in awake:  # awake and idle: spared the probe by its command line's --sleep-idle-seconds
            assert f"its server sleeps after {SLEEP_S} s idle" in r.status and "not probed" in r.status, first
        n_first = len(seen)

        # a client's completion wakes it; the check goes on every 2 s, and it sleeps again within 3 + 5 s
        done = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "hello", "max_tokens": 4},
                          timeout=60)
        assert done.status_code == 200, done.text
        woke_at = time.monotonic()
        props.append("(client's completion answered)")
        seen.append((woke_at - t0, Result(0, "-- a client's POST /v1/completions: 200 --", "")))
        after = srv.log_once((WAKE_LINE, 1), (TASK_LINE, 1))
        assert len(WAKE_LINE.findall(after)) == 1 and len(TASK_LINE.findall(after)) == 1, after[-2000:]
        fell_asleep.clear()
        first_after = len(seen)
        every_2s(lambda r: "asleep" in r.status, SLEEP_S + 5 + 2)
        second = timeline(seen, props)
        assert fell_asleep, ("/props never said is_sleeping true again", second)
        back = fell_asleep[0] - woke_at
        assert back <= SLEEP_S + 5, (round(back, 1), second)
        # the run right after the completion found it awake and idle: not probed, by its command line
        assert props[first_after] == "is_sleeping False" and "sleeps after" in seen[first_after][1].status, second
        assert seen[-1][1].first.startswith("LLAMACPP OK - idle: asleep: "), second
        final = srv.log_once((ASLEEP_LINE, 2))
        assert rec.inference() == [], rec.seen
        assert len(WAKE_LINE.findall(final)) == 1 and len(TASK_LINE.findall(final)) == 1, "only the client's"
        assert len(ASLEEP_LINE.findall(final)) == 2, final[-2000:]
    finally:
        rec.close()
    REPORTS["--sleep-idle-seconds 3 (check every 2 s)"] = (
        f"{second}\n/props said is_sleeping again {back:.1f} s after the client's completion; the check's POSTs: {rec.inference()}; "
        f"log: {len(ASLEEP_LINE.findall(final))} sleeps, {len(WAKE_LINE.findall(final))} wake, "
        f"{len(TASK_LINE.findall(final))} completion task; routes the check asked: "
        f"{sorted({p for _, p in rec.paths()})}; runs before the completion: {n_first}")


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_port_from_llama_arg_port_loading_is_starting_never_down(built, llama, check: Check, tmp_path: Path):
    """No --port: the port is LLAMA_ARG_PORT in its environment. Held before it listens (connection refused),
    then held while it loads (503 "Loading model"), then let go: `starting` (its process found by the host's
    witness through /proc/PID/environ), never `down`, never CRITICAL; OK once it serves. Each hold is the rig's
    shim at the server's own step (tests/rig/held_start.c), reached and let go by event."""
    seen: list[tuple[float, Result]] = []
    phase: list[str] = []

    def runs(n: int, what: str) -> None:
        for _ in range(n):
            seen.append((time.monotonic() - t0, check(srv.url, *FAST, "-t", "4")))
            phase.append(what)
            time.sleep(0.5)

    held = HeldStart(tmp_path / "held", built[1])
    srv = llama(("--metrics", "--parallel", "2"), port_env=True, wait=False, env=held.env)
    try:
        held.reached("start", diag=srv.log_tail)
        environ = Path(f"/proc/{srv.pid}/environ").read_bytes().split(b"\0")
        argv = Path(f"/proc/{srv.pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        assert f"LLAMA_ARG_PORT={srv.port}".encode() in environ and "--port" not in argv, argv
        assert Path(f"/proc/{srv.pid}/exe").resolve() == srv.binary.resolve()
        assert _refused(srv.port)
        t0 = time.monotonic()
        runs(2, "held before it listens")
        held.release("start")
        held.reached("load", diag=srv.log_tail)
        wait_for("its HTTP thread to say it loads", lambda: _health(srv) == 503, 60, 0.05, srv.log_tail)
        runs(3, "loading, held at its model's open")
        held.release("load")
        while not seen or seen[-1][1].code != OK:
            assert time.monotonic() - t0 < 90, timeline(seen, phase)
            seen.append((time.monotonic() - t0, check(srv.url, *FAST, "-t", "4")))
            phase.append("let go")
            time.sleep(0.05)
    finally:
        held.release_all()
    shown = timeline(seen, phase)
    assert all(r.code != CRITICAL and r.word != "down" for _, r in seen), shown
    loading = [r for _, r in seen if r.code != OK]
    # the host's witness found THIS process, its port told by LLAMA_ARG_PORT in its environment only
    assert all((r.code, r.word) == (WARNING, "starting") and f"llama.cpp process {srv.pid} started" in r.status
               and r.first.startswith("LLAMACPP WARNING - starting: ") for r in loading), shown
    assert all("connection refused" in r.status for _, r in seen[:2]), shown
    assert all("/metrics answered HTTP 503" in r.status for _, r in seen[2:5]), shown
    assert seen[-1][1].first.startswith("LLAMACPP OK - "), shown
    REPORTS["LLAMA_ARG_PORT, no --port, while it starts"] = shown


def _health(srv: Flagged) -> int:
    try:
        return srv.get("/health", timeout=5).status_code
    except httpx.HTTPError:
        return 0


API_KEY = "sk-real-llama-guarded-7731"


def test_a_guarded_server_is_read_with_its_key_and_its_stopped_decode_loop_proven_stuck(llama, check, tmp_path):
    """llama-server with --api-key guards /metrics (401 without the key): the check sends the key on every request
    (issue 52), reads it busy, and proves its held decode loop CRITICAL, restartable."""
    srv = llama(("--metrics", "--parallel", "2", "--context-shift", "--api-key", API_KEY))
    key = tmp_path / "key"
    key.write_text(API_KEY + "\n")
    key.chmod(0o600)
    assert srv.get("/metrics", timeout=5).status_code == 401  # the real server guards its page
    keyed = ("--api-key-file", str(key))
    with Load(srv.url, 2, 100_000, ignore_eos=True, model="tiny", repeat=True, api_key=API_KEY) as load:
        deadline = time.monotonic() + 60
        while (first := check(srv.url, *FAST, *STUCK, *keyed)).word != "busy":
            assert time.monotonic() < deadline, first.out
            time.sleep(0.5)
        assert first.first.startswith("LLAMACPP OK - busy"), first.out
        seen = []
        with srv.decode_stopped():
            while not seen or seen[-1].code != CRITICAL:
                assert time.monotonic() < deadline + 60, [r.first for r in seen]
                seen.append(check(srv.url, *FAST, *STUCK, *keyed))
                time.sleep(0.5)
        load.stop()
    assert seen[-1].word in ("stuck", "unresponsive") and seen[-1].first.startswith("LLAMACPP CRITICAL"), seen[-1].out
    REPORTS["--api-key, decode loop stopped"] = "\n".join(r.first for r in [first, *seen])
    without = check(srv.url, *FAST)
    assert "/metrics answered HTTP 401: the server needs an API key (--api-key-file)" in without.first, without.out


def test_the_shipped_startup_probe_passes_a_server_without_metrics(llama, tmp_path):
    """llama.cpp's default, no --metrics: `no metrics` for ever; the shipped startup probe's command
    (contrib/kubernetes/vllm-deployment.yaml) passes it once its model list answers, instead of failing it for ever
    (the kubelet would then kill a healthy server every failureThreshold x periodSeconds)."""
    srv = llama(("--parallel", "2"))
    r = run_script("check_vllm", "--probe", "startup", "-u", srv.url, "--state-dir", str(tmp_path / "state"), "-t",
                   "9", "--idle-completion-timeout", "5", "--reuse-verdict", "5")
    assert r.code == 0 and r.first.startswith("startup pass in spite of: WARNING no metrics: "), r.out
    assert r.first.endswith("(it lists its model: loaded)"), r.out
    REPORTS["startup probe, no --metrics"] = r.first
