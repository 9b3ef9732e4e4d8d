"""The containers tier's rig: Debian's dockerd started here, an image made here, real vLLM as PID 1 of a
container whose HEALTHCHECK is check_vllm's liveness probe, contrib/docker/restart-unhealthy acting on
`unhealthy`, and recorders for everything that happens (docker events, the health runs, the classic /health
check beside it, the probes run with `docker exec`).

Facts it relies on (/work/shared/REAL-COMPONENTS.md, measured again here):
- dockerd runs as a plain background process with its own data root, exec root, socket and pid file,
  `--iptables=false --bridge=none`; the containers use `--network host`, so everything stays on loopback;
  the client is /usr/bin/docker -H unix://SOCK (/usr/local/bin/docker may be another client).
- No registry: the image is `docker import` of a tarball holding Debian's busybox-static as /bin/busybox
  and /bin/sh (vLLM's EngineCore needs /bin/sh); /usr /lib /lib64 /etc, the Python installs, the venvs and
  the model are bind-mounted read-only at their own paths.
- vLLM needs `--shm-size 1g`. Its container's PID 1 writes 19 to /proc/self/autogroup before exec'ing the
  server: runc starts every container process (and every `docker exec`, hence every health run) in its own
  session, so the busy-polling engine gets a low-priority autogroup and the health runs do not.
- After dockerd stops, EXECROOT/netns/default stays mounted: unmount it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests.rig.vllm_server import SERVED_MODEL_NAME, SERVER_ENV, parse_samples

REPO = Path(__file__).resolve().parents[2]
RESTARTER = REPO / "contrib" / "docker" / "restart-unhealthy"
DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"
BUSYBOX = "/bin/busybox"
IMAGE = "check-vllm-containers:tier"
USER = "65534:65534"   # nobody:nogroup, from the host's /etc (bind-mounted)
#: What a health or probe line says when it cannot keep its memory (issue 36: it must say so, and must not here).
NO_MEMORY = ("refusing the state directory", "state not saved", "judged on this run alone")
AUTOGROUP_SH = 'echo 19 > /proc/self/autogroup && exec "$@"'


class RigError(RuntimeError):
    """A component of the rig did not start; the message carries what it said."""


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"({path}: {err.strerror})"


def parse_time(text: str) -> float:
    """Docker's RFC 3339 times (nanoseconds, Z or an offset) as epoch seconds."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?", text.strip())
    if not m:
        raise ValueError(f"not a docker time: {text!r}")
    frac = (m.group(2) or ".0")[:7]
    tz = m.group(3) or "Z"
    return datetime.fromisoformat(m.group(1) + frac + ("+00:00" if tz == "Z" else tz)).timestamp()


# --------------------------------------------------------------------------- dockerd

class Dockerd:
    """dockerd with everything of its own under `root` (a short path: unix socket paths are limited).
    `path_first`: directories put before PATH in dockerd's environment (dockerd looks some helpers up on its PATH
    once, as it starts: e.g. nvidia-container-runtime-hook, which registers its `nvidia` device driver)."""

    def __init__(self, root: Path, path_first: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.path_first = path_first
        self.data = root / "data"
        self.exec_root = root / "x"
        self.sock = root / "docker.sock"
        self.pidfile = root / "dockerd.pid"
        self.log = root / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    def cli(self) -> list[str]:
        return [DOCKER, "-H", self.host]

    def run(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([*self.cli(), *args], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise RigError(f"docker {' '.join(args[:3])} ... failed (exit {r.returncode}): "
                           f"{(r.stderr or r.stdout).strip()[-2000:]}")
        return r

    def start(self, timeout: float = 60) -> str:
        for path in (DOCKERD, DOCKER):
            if not os.access(path, os.X_OK):
                raise RigError(f"{path} is not installed: run .ci/containers-deps.sh")
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [DOCKERD, "--data-root", str(self.data), "--exec-root", str(self.exec_root),
                "--host", self.host, "--pidfile", str(self.pidfile), "--iptables=false", "--bridge=none"]
        env = dict(os.environ)
        if self.path_first:
            env["PATH"] = os.pathsep.join([*map(str, self.path_first), env.get("PATH", os.defpath)])
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=str(self.root), env=env)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RigError(f"dockerd exited with {self.proc.returncode}: {' '.join(argv)}\n{_tail(self.log)}")
            r = subprocess.run([*self.cli(), "version", "--format", "{{.Server.Version}}"],
                               capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                return r.stdout.strip()
            if time.monotonic() > deadline:
                raise RigError(f"dockerd did not answer on {self.sock} within {timeout:g} s: "
                               f"{r.stderr.strip()}\n{_tail(self.log)}")
            time.sleep(0.5)

    def stop(self) -> list[str]:
        """SIGTERM to our dockerd (by its pid), wait, unmount what it leaves; what had to be done by hand."""
        notes = []
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                notes.append("dockerd killed after 30 s")
        netns = self.exec_root / "netns" / "default"
        if os.path.ismount(netns):
            r = subprocess.run(["umount", str(netns)], capture_output=True, text=True)
            notes.append(f"umount {netns}: {'ok' if r.returncode == 0 else r.stderr.strip()}")
        # anything else of ours still mounted (overlay layers of a container dockerd did not clean up)
        for line in Path("/proc/self/mounts").read_text().splitlines()[::-1]:
            target = line.split()[1]
            if target.startswith(str(self.root) + "/"):
                r = subprocess.run(["umount", "-l", target], capture_output=True, text=True)
                notes.append(f"umount -l {target}: {'ok' if r.returncode == 0 else r.stderr.strip()}")
        return notes


def build_image(d: Dockerd, work: Path) -> str:
    """The image: busybox-static as /bin/busybox and /bin/sh, empty mount points, nothing else."""
    if not os.access(BUSYBOX, os.X_OK):
        raise RigError(f"{BUSYBOX} is not installed: run .ci/containers-deps.sh (busybox-static)")
    rootfs = work / "rootfs"
    for sub in ("bin", "root", "tmp", "state", "usr", "lib", "lib64", "etc", "proc", "sys", "dev", "work"):
        (rootfs / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    if not (rootfs / "bin" / "sh").is_symlink():
        (rootfs / "bin" / "sh").symlink_to("busybox")
    (rootfs / "root").chmod(0o755)   # the bind-mounted venvs live under /root: nobody must pass through
    (rootfs / "tmp").chmod(0o1777)
    tar = work / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(rootfs, arcname=".")
    d.run("import", "-c", 'CMD ["/bin/sh"]', str(tar), IMAGE, timeout=120)
    return IMAGE


# --------------------------------------------------------------------------- what the container mounts

def python_roots(prefix: Path) -> list[Path]:
    """A venv and the Python install it was made from (pyvenv.cfg's home), as absolute real paths."""
    roots = [prefix]
    cfg = prefix / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text().splitlines():
            k, _, v = line.partition("=")
            if k.strip() == "home":
                roots.append(Path(v.strip()).resolve().parent)
    roots.append(Path(os.path.realpath(prefix / "bin" / "python")).parent.parent)
    return roots


def ro_mounts(*paths: Path) -> list[str]:
    """-v PATH:PATH:ro for /usr /lib /lib64 /etc and each distinct path not under those. Each path is mounted
    itself, never through a parent: the container's user must be able to pass through the parents Docker
    creates (0755), which the host's may not allow (tox makes .tox/ 0700; /root is 0700)."""
    base = [Path("/usr"), Path("/lib"), Path("/lib64"), Path("/etc")]
    keep: list[Path] = list(base)
    for p in sorted({Path(os.path.realpath(x)) for x in paths}, key=lambda x: len(x.parts)):
        if not any(p == k or k in p.parents for k in base) and p not in keep:
            keep.append(p)
    out = []
    for p in keep:
        if p.exists():
            out += ["-v", f"{p}:{p}:ro"]
    return out


def check_venv() -> Path:
    """The venv whose check_vllm the container runs: this test process's own (tox installs the checkout
    into it); the check must be on its bin/."""
    prefix = Path(sys.prefix)
    exe = prefix / "bin" / "check_vllm"
    if not exe.exists():
        raise RigError(f"{exe} does not exist: run the tier in a venv with the checkout installed (tox -e containers)")
    return prefix


def editable_source(prefix: Path) -> Path | None:
    """The checkout an editable install of check_vllm points at (it must be mounted too), else None."""
    for direct in prefix.glob("lib/python3*/site-packages/check_vllm-*.dist-info/direct_url.json"):
        info = json.loads(direct.read_text())
        if (info.get("dir_info") or {}).get("editable") and info.get("url", "").startswith("file://"):
            return Path(info["url"][len("file://"):])
    return None


def has_probe(check: Path) -> bool:
    r = subprocess.run([str(check), "--help"], capture_output=True, text=True, timeout=60)
    return "--probe" in r.stdout


# --------------------------------------------------------------------------- the vLLM container

@dataclass
class Knobs:
    interval: float = 4.0        # --health-interval
    stuck_seconds: float = 20.0  # the check's --stuck-seconds
    check_timeout: float = 10.0  # the check's -t
    probe_timeout: float = 5.0   # the idle probe's: below -t, or a frozen engine whose gauges froze at 0/0 is never proven
    health_timeout: float = 30.0  # --health-timeout: covers -t and a run's start-up on a starved CPU (13 s seen)
    max_num_seqs: int = 2


def probe_command(check: Path, kind: str, url: str, knobs: Knobs) -> str:
    """The command line of one probe run in the container (a /bin/sh command, as HEALTHCHECK CMD-SHELL)."""
    return (f"{check} --probe {kind} -u {url} --state-dir /state --stuck-seconds {knobs.stuck_seconds:g} "
            f"--probe-timeout {knobs.probe_timeout:g} -t {knobs.check_timeout:g}")


class VllmContainer:
    def __init__(self, d: Dockerd, name: str, venv: Path, model: Path, port: int, state: Path,
                 check_prefix: Path, knobs: Knobs) -> None:
        self.d, self.name, self.venv, self.model, self.port = d, name, venv, model, port
        self.state, self.check_prefix, self.knobs = state, check_prefix, knobs
        self.check = check_prefix / "bin" / "check_vllm"
        self.url = f"http://127.0.0.1:{port}"
        self.read_only = True

    def server_argv(self) -> list[str]:
        return ["/bin/sh", "-c", AUTOGROUP_SH, "sh",
                str(self.venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model), "--served-model-name", SERVED_MODEL_NAME,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--max-num-seqs", str(self.knobs.max_num_seqs), "--max-model-len", "2048",
                "--dtype", "float32", "--enforce-eager", "--enable-log-requests"]

    def probe(self, kind: str) -> str:
        return probe_command(self.check, kind, self.url, self.knobs)

    def run_argv(self) -> list[str]:
        k = self.knobs
        env = {**SERVER_ENV, "HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/cache", "VLLM_CACHE_ROOT": "/tmp/vllm",
               "VIRTUAL_ENV": str(self.venv), "PATH": f"{self.venv}/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        argv = ["run", "-d", "--name", self.name, "--network", "host", "--shm-size", "1g",
                "--user", USER, "--tmpfs", "/tmp:rw,exec,mode=1777,size=2g",
                "-v", f"{self.state}:/state:rw",
                *ro_mounts(*python_roots(self.venv), *python_roots(self.check_prefix), self.model,
                           *filter(None, [editable_source(self.check_prefix)])),
                "--health-cmd", self.probe("liveness"),
                "--health-interval", f"{k.interval:g}s", "--health-timeout", f"{k.health_timeout:g}s",
                "--health-retries", "1", "--health-start-period", "0s"]
        if self.read_only:
            argv.append("--read-only")
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        return [*argv, IMAGE, *self.server_argv()]

    def start(self) -> float:
        self.state.mkdir(parents=True, exist_ok=True)
        os.chown(self.state, 65534, 65534)
        self.state.chmod(0o700)
        t = time.time()
        self.d.run(*self.run_argv(), timeout=120)
        return t

    def inspect_state(self) -> dict:
        r = self.d.run("inspect", "--format", "{{json .State}}", self.name, check=False, timeout=30)
        if r.returncode != 0:
            return {}
        return json.loads(r.stdout)

    def health(self) -> str:
        return ((self.inspect_state().get("Health") or {}).get("Status")) or "-"

    def top(self) -> list[tuple[int, str]]:
        r = self.d.run("top", self.name, "-eo", "pid,args", check=False, timeout=30)
        out = []
        for line in r.stdout.splitlines()[1:]:
            pid, _, args = line.strip().partition(" ")
            if pid.isdigit():
                out.append((int(pid), args.strip()))
        return out

    def engine_core_pid(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            for pid, args in self.top():
                if "EngineCore" in args:
                    return pid
            if time.monotonic() > deadline:
                raise RigError(f"no VLLM::EngineCore in `docker top {self.name}`: {self.top()}")
            time.sleep(0.5)

    def exec_probe(self, kind: str, timeout: float = 60) -> tuple[int, str, float]:
        """`docker exec NAME sh -c PROBE` as the container's user: exit, first stdout line, seconds."""
        t = time.monotonic()
        r = self.d.run("exec", self.name, "/bin/sh", "-c", self.probe(kind), check=False, timeout=timeout)
        line = (r.stdout.strip().splitlines() or [r.stderr.strip() or "(no output)"])[0]
        return r.returncode, line, time.monotonic() - t

    def logs(self) -> list[tuple[float, str]]:
        r = self.d.run("logs", "--timestamps", self.name, check=False, timeout=60)
        out = []
        for line in (r.stdout + r.stderr).splitlines():
            ts, _, text = line.partition(" ")
            try:
                out.append((parse_time(ts), text))
            except ValueError:
                continue
        return sorted(out)

    def remove(self) -> str:
        r = self.d.run("rm", "-f", self.name, check=False, timeout=60)
        return (r.stdout or r.stderr).strip()


# --------------------------------------------------------------------------- recorders

@dataclass
class HealthRun:
    start: float
    end: float
    exit: int
    output: str


@dataclass
class Recorder:
    """docker events for the container, its health runs and status (from `docker inspect` every second),
    the classic check from the host, the probes run by hand, the phases; one timeline."""
    c: VllmContainer
    t0: float
    events: list[tuple[float, str]] = field(default_factory=list)        # docker events (action)
    statuses: list[tuple[float, str]] = field(default_factory=list)      # health status changes seen
    runs: dict[float, HealthRun] = field(default_factory=dict)           # by start time
    classic: list[dict] = field(default_factory=list)
    probes: list[tuple[float, str, int, str]] = field(default_factory=list)  # (at, kind, exit, line)
    notes: list[tuple[float, str]] = field(default_factory=list)
    phases: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        #: When the last `docker inspect` that has been read was asked (a run ended before it is in `runs`).
        self.looked = 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._events_proc: subprocess.Popen | None = None

    # -- life
    def start(self) -> None:
        self._events_proc = subprocess.Popen(
            [*self.c.d.cli(), "events", "--filter", f"container={self.c.name}", "--format", "{{json .}}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, stdin=subprocess.DEVNULL)
        for target in (self._read_events, self._sample, self._classic_loop):
            th = threading.Thread(target=target, daemon=True, name=f"recorder-{target.__name__}")
            th.start()
            self._threads.append(th)

    def stop(self) -> None:
        self._stop.set()
        if self._events_proc and self._events_proc.poll() is None:
            self._events_proc.terminate()
            self._events_proc.wait(10)
        for th in self._threads:
            th.join(10)

    def _read_events(self) -> None:
        assert self._events_proc and self._events_proc.stdout
        for line in self._events_proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            at = ev.get("timeNano", 0) / 1e9 or time.time()
            action = ev.get("Action") or ev.get("status") or "?"
            if action.startswith("exec_"):
                continue   # every health run and probe makes three of these
            self.events.append((at, action))

    def _sample(self) -> None:
        while not self._stop.is_set():
            looked = time.time()
            st = self.c.inspect_state()
            health = st.get("Health") or {}
            status = health.get("Status") or "-"
            if not self.statuses or self.statuses[-1][1] != status:
                self.statuses.append((time.time(), status))
            for entry in health.get("Log") or []:
                try:
                    start = parse_time(entry["Start"])
                    lines = (entry.get("Output") or "").strip().splitlines()
                    run = HealthRun(start, parse_time(entry["End"]), int(entry["ExitCode"]),
                                    lines[0] if lines else "(no output)")
                except (KeyError, ValueError):
                    continue
                self.runs.setdefault(start, run)
            self.looked = looked  # every health run that ended before this has been seen
            self._stop.wait(1.0)

    def _classic_loop(self) -> None:
        """The classic healthcheck (`curl -f -m 1 /health`), from the host at the health interval."""
        while not self._stop.is_set():
            t = time.time()
            try:
                with urllib.request.urlopen(self.c.url + "/health", timeout=1.0) as resp:
                    ok, result = 200 <= resp.status < 400, f"HTTP {resp.status}"
            except urllib.error.HTTPError as err:
                ok, result = False, f"HTTP {err.code}"
            except (TimeoutError, OSError) as err:
                reason = getattr(err, "reason", err)
                ok = False
                result = ("timeout" if isinstance(reason, TimeoutError) else
                          "refused" if isinstance(reason, ConnectionRefusedError) else type(reason).__name__)
            self.classic.append({"at": t, "ok": ok, "result": result, "seconds": time.time() - t})
            self._stop.wait(max(0.0, self.c.knobs.interval - (time.time() - t)))

    # -- what the tests do
    def phase(self, name: str) -> float:
        t = time.time()
        self.phases.append((t, name))
        return t

    def note(self, text: str, at: float | None = None) -> float:
        t = time.time() if at is None else at
        self.notes.append((t, text))
        return t

    def probe(self, kind: str) -> tuple[int, str]:
        t = time.time()
        rc, line, _ = self.c.exec_probe(kind)
        self.probes.append((t, kind, rc, line))
        return rc, line

    # -- reading it back
    def status_at(self, t: float) -> str:
        s = "-"
        for at, status in self.statuses:
            if at <= t:
                s = status
        return s

    def health_runs(self, t0: float = 0.0, t1: float = float("inf")) -> list[HealthRun]:
        return [r for k, r in sorted(self.runs.items()) if t0 <= k < t1]

    def classic_between(self, t0: float, t1: float) -> list[dict]:
        return [p for p in self.classic if t0 <= p["at"] < t1]

    def events_named(self, action: str, t0: float = 0.0) -> list[float]:
        return [at for at, a in self.events if a == action and at >= t0]

    def phase_at(self, t: float) -> str:
        p = "-"
        for at, name in self.phases:
            if at <= t:
                p = name
        return p

    def timeline(self) -> str:
        rows: list[tuple[float, str, str]] = []
        for at, action in self.events:
            rows.append((at, "docker event", action))
        for r in self.health_runs():
            rows.append((r.start, f"HEALTHCHECK exit {r.exit}", f"{r.output}  ({r.end - r.start:.1f}s)"))
        for at, kind, rc, line in self.probes:
            rows.append((at, f"exec {kind} exit {rc}", line))
        for at, text in self.notes:
            rows.append((at, ">>>", text))
        # the classic check: a row when its result changes
        prev = None
        for p in self.classic:
            key = (p["ok"], p["result"].split(" ")[0])
            if key != prev:
                rows.append((p["at"], "classic /health", f"{'pass' if p['ok'] else 'FAIL'} {p['result']} "
                                                         f"({p['seconds']:.2f}s)"))
                prev = key
        rows.sort(key=lambda r: r[0])
        head = f"{'time':>6}  {'phase':<10} {'health':<10} {'source':<22} what"
        lines = [head, "-" * 100]
        for at, source, what in rows:
            lines.append(f"{at - self.t0:6.1f}  {self.phase_at(at):<10} {self.status_at(at):<10} "
                         f"{source:<22} {what}")
        lines.append("(time: seconds since `docker run`; health: the container's health status as `docker inspect` "
                     "showed it then; HEALTHCHECK: check_vllm's liveness probe as Docker ran it; exec: a probe run "
                     "with `docker exec`; classic /health: GET /health with a 1 s timeout from the host at the "
                     "same interval, a row when its result changes)")
        return "\n".join(lines)


# --------------------------------------------------------------------------- the restarter

class Restarter:
    """contrib/docker/restart-unhealthy, run as shipped, with DOCKER pointing at our dockerd."""

    def __init__(self, d: Dockerd, name: str, log: Path) -> None:
        self.d, self.name, self.log = d, name, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "DOCKER": " ".join(shlex.quote(a) for a in self.d.cli()), "STOP_TIMEOUT": "10"}
        self.proc = subprocess.Popen(["/bin/sh", str(RESTARTER), "--filter", f"container={self.name}"],
                                     env=env, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        time.sleep(1.0)
        if self.proc.poll() is not None:
            raise RigError(f"{RESTARTER} exited at once ({self.proc.returncode}): {_tail(self.log)}")

    def lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except OSError:
            return []

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)   # its own session: the sh, the pipeline, docker events
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# --------------------------------------------------------------------------- metrics

def metrics(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=timeout) as resp:
            return resp.read().decode(errors="replace")
    except (OSError, ValueError):
        return None


def total(text: str | None, name: str) -> float | None:
    if text is None:
        return None
    found = [v for n, _, v in parse_samples(text) if n == name]
    return sum(found) if found else None


def stopped_processes() -> list[tuple[int, str]]:
    """Host processes in state T (stopped) that are vLLM's: none may be left behind."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state = raw[raw.rfind(")") + 2:].split()[0]
        if state == "T" and ("VLLM" in raw or "vllm" in cmd):
            out.append((int(entry), cmd.strip() or raw[raw.find("("):raw.rfind(")") + 1]))
    return out
