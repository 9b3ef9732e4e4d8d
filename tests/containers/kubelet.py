"""A kubelet rig: the shipped Deployment (contrib/kubernetes/vllm-deployment.yaml) read and run as the kubelet runs
it, against a real vLLM started as a process. There is no kubelet on these machines; this does what its source does
for the parts the manifest uses, and nothing else:

- **the emptyDir** (kubernetes pkg/volume/emptydir/empty_dir.go, `setupDir`): made with `perm os.FileMode = 0777`
  (chmod'ed to it whatever the umask); with the pod's `fsGroup`, pkg/volume/volume_linux.go (`changeFilePermission`)
  chowns it to (its owner, root):fsGroup and ORs `rwMask | execMask | os.ModeSetgid` into its mode: `drwxrwsrwx
  root:1000`. It lives as long as the pod: a container restart keeps it (the rig's pod is the test module).
- **the container**: its own mount namespace (`unshare --mount`) in which each emptyDir of the manifest that the rig
  makes is bound at its `mountPath` (the state volume at /var/lib/check_vllm, `tmp` at /tmp); its processes run as
  `runAsUser`:`runAsGroup` with `fsGroup` as a supplementary group (setpriv), with the container's `env`. What runs in
  it is real vLLM (the image's entry point; the rig's own arguments: loopback, the tiny model, --max-num-seqs 2).
  PID 1 of the container is the API server; like runc, the rig starts it in a session of its own, and the
  engine's busy polling gets a low-priority autogroup (tests/rig/vllm_server.py's recipe).
- **exec probes** (pkg/kubelet/prober/worker.go, prober.go): one worker per probe, each probing at once when the
  container starts and then every `periodSeconds`; the command runs in the container (nsenter into its mount
  namespace) as its user with its env, killed and counted a failure past `timeoutSeconds`; `failureThreshold` and
  `successThreshold` consecutive results change the probe's state; until the startup probe succeeds, liveness and
  readiness do not run (readiness starts as Failure, liveness as Success), and once it has, startup stops; a liveness
  (or startup) failure puts the worker on hold until a new container exists.
- **the kill and the restart** (pkg/kubelet/kuberuntime): a liveness failure kills the container with the pod's
  `terminationGracePeriodSeconds` (the API's default 30 when unset; a probe's own takes precedence): SIGTERM to PID 1,
  SIGKILL to everything left at the end of the grace, and everything in the container dies with PID 1 (a PID
  namespace's rule, done here by killing the process group). `restartPolicy: Always` (a Deployment's): the container
  is started again at once (the kubelet's back-off applies from the second restart on); restartCount counts it.
  A `lifecycle.preStop` exec hook runs first, in the container as its user, within the grace; what it took comes off
  the grace the kill then gives, never below 2 s (killContainer, executePreStopHook, minimumGracePeriodInSeconds).

One substitution, and only one: the probes' and the hook's command lines are the manifest's own, word for word, except the value of
`-u` (`http://127.0.0.1:8000`), whose port is the test's free port (port 8000 of the host's loopback is not ours to
take). `--state-dir /var/lib/check_vllm` stays: the emptyDir is bound there in the container's mount namespace.
"""

from __future__ import annotations

import os
import shlex
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tests.rig.vllm_server import SERVER_ENV, VllmServer, _alive, descendants, group_members, proc_comm

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "contrib" / "kubernetes" / "vllm-deployment.yaml"
STATE_VOLUME = "check-vllm-state"
TMP_VOLUME = "tmp"
KINDS = ("startup", "readiness", "liveness")
#: kuberuntime's minimumGracePeriodInSeconds: what a kill gives after a preStop hook that took the rest.
MINIMUM_GRACE = 2.0


class KubeletRigError(RuntimeError):
    """The rig could not do what the kubelet would (a manifest it does not understand, a mount that failed)."""


# --------------------------------------------------------------------------- the manifest

@dataclass(frozen=True)
class ProbeSpec:
    kind: str
    command: tuple[str, ...]
    period: float          # periodSeconds (API default 10)
    timeout: float         # timeoutSeconds (API default 1)
    failure_threshold: int  # failureThreshold (API default 3)
    success_threshold: int  # successThreshold (API default 1)
    initial_delay: float    # initialDelaySeconds (API default 0)


@dataclass(frozen=True)
class PodSpec:
    run_as_user: int
    run_as_group: int
    fs_group: int | None
    env: dict[str, str]
    probes: dict[str, ProbeSpec]
    grace: float                   # terminationGracePeriodSeconds (API default 30)
    mounts: dict[str, str]         # volume name -> mountPath, for the emptyDir volumes
    restart_policy: str
    #: lifecycle.preStop.exec.command: run in the container before each kill (None: no hook).
    pre_stop: tuple[str, ...] | None = None


def read_manifest(path: Path = MANIFEST) -> PodSpec:
    """The Deployment's pod template as the kubelet gets it (with the API server's defaults filled in)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    deps = [d for d in docs if d.get("kind") == "Deployment"]
    if len(deps) != 1:
        raise KubeletRigError(f"{path}: expected one Deployment, found {len(deps)}")
    pod = deps[0]["spec"]["template"]["spec"]
    if len(pod["containers"]) != 1:
        raise KubeletRigError(f"{path}: the rig runs one container, the pod has {len(pod['containers'])}")
    c = pod["containers"][0]
    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}
    user = csc.get("runAsUser", psc.get("runAsUser"))
    group = csc.get("runAsGroup", psc.get("runAsGroup", user))
    if user is None:
        raise KubeletRigError(f"{path}: no runAsUser: the image's user would run the probes, which the rig cannot know")
    probes = {}
    for kind in KINDS:
        p = c.get(f"{kind}Probe")
        if not p:
            continue
        if "exec" not in p:
            raise KubeletRigError(f"{path}: {kind}Probe is not an exec probe: {sorted(p)}")
        probes[kind] = ProbeSpec(kind, tuple(p["exec"]["command"]), float(p.get("periodSeconds", 10)),
                                 float(p.get("timeoutSeconds", 1)), int(p.get("failureThreshold", 3)),
                                 int(p.get("successThreshold", 1)), float(p.get("initialDelaySeconds", 0)))
    empty = {v["name"] for v in pod.get("volumes") or [] if "emptyDir" in v}
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts") or [] if m["name"] in empty}
    return PodSpec(int(user), int(group), psc.get("fsGroup"),
                   {e["name"]: str(e["value"]) for e in c.get("env") or [] if "value" in e},
                   probes, float(pod.get("terminationGracePeriodSeconds", 30)), mounts,
                   pod.get("restartPolicy", "Always"), _pre_stop(c, path))


def _pre_stop(container: dict, path: Path) -> tuple[str, ...] | None:
    hook = (container.get("lifecycle") or {}).get("preStop")
    if not hook:
        return None
    if "exec" not in hook:
        raise KubeletRigError(f"{path}: the rig runs exec preStop hooks only, not {sorted(hook)}")
    return tuple(hook["exec"]["command"])


def substitute_url(command: tuple[str, ...], url: str) -> tuple[str, ...]:
    """The one substitution: the value after -u takes the test's port; everything else stays as written."""
    argv = list(command)
    if argv.count("-u") != 1:
        raise KubeletRigError(f"expected one -u in the probe's command, got {command}")
    i = argv.index("-u") + 1
    old, new = urlsplit(argv[i]), urlsplit(url)
    if (old.scheme, old.hostname, old.path) != (new.scheme, new.hostname, new.path):
        raise KubeletRigError(f"only the port may change: {argv[i]} -> {url}")
    argv[i] = url
    return tuple(argv)


def make_empty_dir(path: Path, fs_group: int | None) -> None:
    """pkg/volume/emptydir setupDir (0777, whatever the umask), then volume_linux.go's fsGroup ownership."""
    path.mkdir(parents=False)
    os.chmod(path, 0o777)
    if fs_group is not None:
        os.lchown(path, -1, fs_group)
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        os.chmod(path, mode | 0o660 | 0o110 | stat.S_ISGID)   # rwMask | execMask | ModeSetgid


def describe(path: Path) -> str:
    st = os.lstat(path)
    return f"{stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid} ({oct(stat.S_IMODE(st.st_mode))})"


# --------------------------------------------------------------------------- the container

#: the mount namespace's set-up, run as root before the container's user takes over. Its arguments: the pairs
#: "HOSTDIR MOUNTPATH" of the emptyDirs, `--`, the host paths the image would hold that lie under a mountPath (the
#: venvs and the model, under /tmp in a CI clone: set aside before the emptyDir covers them, then put back in it,
#: as an image's own files would be there), `--`, the command. No path holds a space (the rig's own and tox's).
MOUNT_SH = r"""
set -e
volumes= keeps=
while [ "$1" != "--" ]; do volumes="$volumes $1"; shift; done; shift
while [ "$1" != "--" ]; do keeps="$keeps $1"; shift; done; shift
bind_volumes() {
    while [ $# -gt 0 ]; do
        src=$1 dst=$2; shift 2
        if [ ! -d "$dst" ]; then
            parent=$(dirname "$dst")
            mount -t tmpfs -o mode=0755,size=1m kubelet-rig "$parent"
            mkdir "$dst"
        fi
        mount --bind "$src" "$dst"
    done
}
if [ -n "$keeps" ]; then
    [ -d /mnt ] || mkdir /mnt
    mount -t tmpfs -o mode=0700,size=1m kubelet-keep /mnt
    i=0; for k in $keeps; do mkdir /mnt/$i; mount --bind "$k" /mnt/$i; i=$((i+1)); done
fi
bind_volumes $volumes
i=0; for k in $keeps; do mkdir -p "$k"; mount --bind /mnt/$i "$k"; i=$((i+1)); done
exec "$@"
"""
AUTOGROUP_SH = 'echo 19 > /proc/self/autogroup && exec "$@"'


@dataclass
class ProbeRun:
    kind: str
    start: float
    end: float
    exit: int | None        # None: killed at timeoutSeconds
    line: str
    container: int          # which container (0: the first, 1 after the first restart)
    counted: str            # what the worker did with the result ("" or "started", "ready", "KILL", ...)


@dataclass
class Kubelet:
    """One pod: one container (real vLLM) and its three probe workers."""
    spec: PodSpec
    pod_dir: Path
    url: str
    venv: Path
    model: Path
    check_bin: Path
    max_num_seqs: int = 2
    runs: list[ProbeRun] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    restart_count: int = 0
    kills: list[tuple[float, str]] = field(default_factory=list)
    #: Each preStop hook run: (when, seconds, what it said).
    pre_stops: list[tuple[float, float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.port = urlsplit(self.url).port
        self.manifest = MANIFEST
        self.t0 = time.time()
        self.measured: dict[str, object] = {}
        self.starts: list[tuple[float, int]] = []   # (when, container)
        self.volumes: dict[str, Path] = {}
        self.server: VllmServer | None = None
        self.container = -1
        self.started = False           # the container's Started (startup probe succeeded)
        self.ready = False             # readiness state
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._new_container = threading.Condition(self._lock)
        self._workers: list[threading.Thread] = []
        self.commands = {k: substitute_url(p.command, self.url) for k, p in self.spec.probes.items()}

    # -- the pod
    def make_volumes(self) -> None:
        for name, _mount_path in sorted(self.spec.mounts.items()):
            if name not in (STATE_VOLUME, TMP_VOLUME):
                continue   # dshm: the host's /dev/shm serves; the models volume is a PVC (the rig's model dir)
            path = self.pod_dir / "volumes" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            make_empty_dir(path, self.spec.fs_group)
            self.volumes[name] = path
        if STATE_VOLUME not in self.volumes:
            raise KubeletRigError(f"the manifest mounts no emptyDir named {STATE_VOLUME}: {self.spec.mounts}")
        self.event(f"emptyDir {STATE_VOLUME} made: {describe(self.volumes[STATE_VOLUME])}, mounted at "
                   f"{self.spec.mounts[STATE_VOLUME]}")

    def as_user(self) -> list[str]:
        s = self.spec
        groups = f"--groups={s.fs_group}" if s.fs_group is not None else "--clear-groups"
        # CAP_DAC_READ_SEARCH only so that this checkout's venvs under /root (0700) can be started; every write
        # obeys the owner and mode as for any user (tests/hardening/test_state_owner.py does the same)
        return ["setpriv", f"--reuid={s.run_as_user}", f"--regid={s.run_as_group}", groups,
                "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]

    def env(self) -> dict[str, str]:
        """The container's environment: the image's (PATH with check_vllm and vLLM, vLLM's settings) and the
        manifest's `env`."""
        path = f"{self.check_bin.parent}:{self.venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"PATH": path, "VIRTUAL_ENV": str(self.venv), **SERVER_ENV, **self.spec.env}

    def _mount_args(self) -> list[str]:
        args = []  # the deepest mountPath first: a shallow one (/tmp) may cover another's host directory
        for name, host in sorted(self.volumes.items(), key=lambda v: -len(Path(self.spec.mounts[v[0]]).parts)):
            args += [str(host), self.spec.mounts[name]]
        return [*args, "--", *map(str, self._kept())]

    def _kept(self) -> list[Path]:
        """What the container runs from the host (the vLLM venv and its Python, the check's, the model) that a
        mountPath would cover: /tmp holds them all when CI's clone and HOME are under /tmp."""
        from .rig import editable_source, python_roots

        prefix = self.check_bin.parent.parent
        needed = {Path(os.path.realpath(p)) for p in (*python_roots(self.venv), *python_roots(prefix), self.model,
                                                      *filter(None, [editable_source(prefix)]))}
        covered = [Path(self.spec.mounts[name]) for name in self.volumes]
        under = sorted((p for p in needed if any(m in p.parents for m in covered)), key=lambda p: len(p.parts))
        kept: list[Path] = []
        for p in under:
            if not any(k == p or k in p.parents for k in kept):
                kept.append(p)
        return kept

    def server_argv(self) -> list[str]:
        return [str(self.venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model), "--served-model-name", "tiny-llama",
                "--host", "127.0.0.1", "--port", str(self.port),
                "--max-num-seqs", str(self.max_num_seqs), "--max-model-len", "2048",
                "--dtype", "float32", "--enforce-eager"]

    def start_container(self) -> None:
        rig = self

        class Container(VllmServer):
            def command(self) -> list[str]:
                return ["setsid", "unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNT_SH, "sh",
                        *rig._mount_args(), "--", *rig.as_user(), "sh", "-c", AUTOGROUP_SH, "sh",
                        *rig.server_argv()]

            def env(self) -> dict[str, str]:
                return rig.env()

        log = self.pod_dir / f"vllm-container-{self.container + 1}.log"
        srv = Container(self.venv, self.model, self.port, log_path=log)
        srv.start(wait=False)
        self._wait_exec(srv)
        with self._lock:
            self.server = srv
            self.container += 1
            self.started = False
            self.ready = False
            self.starts.append((time.time(), self.container))
            self.event(f"container {self.container} started: PID 1 = host pid {srv.pid} "
                       f"(vLLM as uid {self.spec.run_as_user}, its own mount namespace)")

    def _wait_exec(self, srv: VllmServer, timeout: float = 20.0) -> None:
        """The runtime's StartContainer returns once the container's process runs with its mounts in place: here,
        once PID 1 has exec'd vLLM's python (the mount set-up and setpriv are behind it). A probe sooner would
        find the mountPath not yet bound."""
        want = str(self.venv / "bin" / "python")
        deadline = time.monotonic() + timeout
        while True:
            assert srv.proc is not None
            try:
                argv0 = Path(f"/proc/{srv.proc.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            except OSError:
                argv0 = ""
            if argv0 == want:
                return
            if srv.proc.poll() is not None or time.monotonic() > deadline:
                raise KubeletRigError(f"the container's PID 1 did not exec {want} (exit {srv.proc.poll()}): "
                                      f"{srv.log_tail(20)}")
            time.sleep(0.05)

    def pid1(self) -> int:
        assert self.server and self.server.pid
        return self.server.pid

    def engine_core_pid(self) -> int:
        assert self.server
        return self.server.engine_core_pid()

    def kill_container(self, why: str) -> float:
        """The runtime's StopContainer: SIGTERM to PID 1, SIGKILL to all at the end of the grace (or as soon as
        PID 1 is gone: the PID namespace dies with it). Returns the seconds it took."""
        srv = self.server
        assert srv and srv.proc
        t = time.time()
        grace = self.spec.grace - self.pre_stop(why) if self.spec.pre_stop else self.spec.grace
        grace = max(grace, MINIMUM_GRACE)
        pgid = srv.proc.pid
        members = set(srv.all_pids()) | set(group_members(pgid))
        self.event(f"kill container {self.container} ({why}): SIGTERM to PID 1, grace {grace:g} s")
        try:
            os.kill(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            srv.proc.wait(grace)
            how = f"PID 1 exited after SIGTERM in {time.time() - t:.1f} s"
        except subprocess.TimeoutExpired:
            how = f"PID 1 still there after the grace ({grace:g} s): SIGKILL"
        members |= set(group_members(pgid)) | set(descendants(pgid))
        for p in members:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        srv.proc.wait(30)
        end = time.monotonic() + 20
        while any(_alive(p) for p in members) and time.monotonic() < end:
            time.sleep(0.2)
        left = [(p, proc_comm(p)) for p in members if _alive(p)]
        if left:
            raise KubeletRigError(f"processes of container {self.container} survived SIGKILL: {left}")
        srv.proc = None
        self.kills.append((t, why))
        self.event(f"container {self.container} gone: {how}; {len(members)} processes")
        return time.time() - t

    def pre_stop(self, why: str) -> float:
        """kuberuntime's executePreStopHook: the hook, as the container's user in its mount namespace, within the
        whole grace; the seconds it took come off the grace the kill then gives (killContainer)."""
        assert self.spec.pre_stop
        t0 = time.time()
        argv = ["nsenter", f"--mount=/proc/{self.pid1()}/ns/mnt", "--", *self.as_user(),
                *substitute_url(self.spec.pre_stop, self.url)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=self.spec.grace, env=self.env(),
                               stdin=subprocess.DEVNULL, cwd="/")
            said = f"exit {r.returncode}: {(r.stdout.strip().splitlines() or [r.stderr.strip()[-300:]])[-1]}"
        except subprocess.TimeoutExpired:
            said = f"killed at the grace ({self.spec.grace:g} s)"
        took = time.time() - t0
        self.pre_stops.append((t0, took, said))
        self.event(f"preStop hook of container {self.container} ({why}) in {took:.1f} s: {said}")
        return took

    # -- the probes
    def probe_argv(self, kind: str) -> list[str]:
        """`kubectl exec`-like: into the container's mount namespace, as its user, the manifest's command."""
        return ["nsenter", f"--mount=/proc/{self.pid1()}/ns/mnt", "--", *self.as_user(), *self.commands[kind]]

    def run_probe(self, kind: str) -> tuple[int | None, str, float, float]:
        spec = self.spec.probes[kind]
        t0 = time.time()
        try:
            r = subprocess.run(self.probe_argv(kind), capture_output=True, text=True, timeout=spec.timeout,
                               env=self.env(), stdin=subprocess.DEVNULL, cwd="/")
            rc: int | None = r.returncode
            line = (r.stdout.strip().splitlines() or [r.stderr.strip()[-300:] or "(no output)"])[0]
        except subprocess.TimeoutExpired as exc:
            rc = None
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            line = f"timed out after {spec.timeout:g} s (timeoutSeconds): {out.strip()[:200]}"
        return rc, line, t0, time.time()

    def _worker(self, kind: str) -> None:
        """worker.go's loop: doProbe at once, then on each tick of a periodSeconds ticker (a tick missed while a
        probe ran is dropped, as a Go ticker drops it)."""
        spec = self.spec.probes[kind]
        container, on_hold, last, run = -1, False, None, 0
        next_at = time.time()
        while not self._stop.is_set():
            if self._stop.wait(max(0.0, next_at - time.time())):
                return
            next_at += spec.period
            while next_at < time.time() - spec.period:
                next_at += spec.period
            with self._lock:
                if self.container != container:    # a new container: a fresh result, probing resumes
                    container, on_hold, last, run = self.container, False, None, 0
                # startup gates the other two; once it has passed, startup stops
                gated = (kind != "startup") != self.started
                gone = self.server is None or self.server.proc is None
            if on_hold or gated or gone:
                continue
            rc, line, t0, t1 = self.run_probe(kind)
            result = "Success" if rc == 0 else "Failure"
            run = run + 1 if result == last else 1
            last = result
            counted = ""
            with self._lock:
                if self.container != container:
                    continue                       # the container changed under the run: thrown away
                threshold = spec.failure_threshold if result == "Failure" else spec.success_threshold
                if run >= threshold:
                    if kind == "startup" and result == "Success":
                        self.started, counted = True, "started"
                    elif kind == "readiness":
                        if self.ready != (result == "Success"):
                            counted = "ready" if result == "Success" else "not ready"
                        self.ready = result == "Success"
                    elif kind in ("liveness", "startup") and result == "Failure":
                        counted = "KILL"
                        on_hold, run = True, 0
                self.runs.append(ProbeRun(kind, t0, t1, rc, line, container, counted))
            if counted == "KILL":
                self._restart(f"{kind} probe failed {spec.failure_threshold}x: {line}")
            elif counted:
                self.event(f"{kind}: {counted}")

    def _restart(self, why: str) -> None:
        self.kill_container(why)
        if self.spec.restart_policy == "Never" or self._stop.is_set():
            return
        with self._lock:
            self.restart_count += 1
        self.start_container()

    def start(self) -> None:
        self.t0 = time.time()
        self.make_volumes()
        self.start_container()
        for kind in self.spec.probes:
            th = threading.Thread(target=self._worker, args=(kind,), daemon=True, name=f"kubelet-{kind}")
            th.start()
            self._workers.append(th)

    def stop(self) -> None:
        self._stop.set()
        for th in self._workers:
            th.join(60)
        if self.server is not None:
            self.server.stop()

    # -- the record
    def event(self, text: str) -> float:
        t = time.time()
        self.events.append((t, text))
        return t

    def runs_of(self, kind: str | None = None, t0: float = 0.0, t1: float = float("inf")) -> list[ProbeRun]:
        return [r for r in list(self.runs) if (kind is None or r.kind == kind) and t0 <= r.start < t1]

    def container_at(self, t: float) -> int:
        c = -1
        for at, n in self.starts:
            if at <= t:
                c = n
        return c

    def command_line(self, kind: str) -> str:
        return shlex.join(self.commands[kind])
