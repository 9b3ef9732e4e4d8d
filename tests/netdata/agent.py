"""A real Netdata agent (Debian's netdata 1.37) run by the tests on loopback, with our plugin in its plugins dir.

No systemd and nothing of the system's own /etc/netdata: a generated netdata.conf points every directory
into a temporary tree, keeps the database in RAM, turns off every internal and external plugin but ours,
and loads only our health file. Recipe: /work/shared/REAL-COMPONENTS.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.package import layout
from tests.rig.ports import free_port  # noqa: F401  (re-exported: one owner, tests/rig)

REPO = Path(__file__).resolve().parents[2]
CONTRIB = REPO / "contrib" / "netdata"
DEPS = REPO / ".ci" / "netdata-deps.sh"


class NetdataError(RuntimeError):
    pass


def netdata_binary() -> str:
    found = shutil.which("netdata") or ("/usr/sbin/netdata" if os.access("/usr/sbin/netdata", os.X_OK) else None)
    if not found:
        raise NetdataError(f"no netdata binary: run `bash {DEPS}` (Debian package netdata)")
    return found


_INTERNAL_OFF = ("proc", "diskspace", "cgroups", "tc", "idlejitter", "checks", "apps", "python.d", "charts.d",
                 "node.d", "go.d", "ebpf", "statsd", "timex", "slabinfo", "perf", "fping", "ioping", "nfacct",
                 "cups", "freeipmi", "xenstat", "netdata monitoring", "netdata monitoring extended")


def netdata_conf(root: Path, port: int, plugins: Path, stock_health: Path | None = None) -> str:
    off = "\n".join(f"    {name} = no" for name in _INTERNAL_OFF)
    return f"""[global]
    hostname = vllm-netdata-test
    run as user = root
[db]
    mode = ram
    update every = 1
    retention = 3600
[directories]
    config = {root}/etc
    stock config = {root}/stock
    log = {root}/log
    cache = {root}/cache
    lib = {root}/lib
    home = {root}/lib
    run = {root}/run
    plugins = "{plugins}"
    health config = {root}/etc/health.d
    stock health config = {stock_health or root / "stock" / "health.d"}
    web = /usr/share/netdata/web
[logs]
    error = {root}/log/error.log
    access = none
    debug = none
    collector = {root}/log/collector.log
    health = {root}/log/health.log
[web]
    bind to = 127.0.0.1:{port}
[plugins]
    enable running new plugins = no
    vllm = yes
{off}
[statsd]
    enabled = no
[ml]
    enabled = no
[registry]
    enabled = no
[health]
    enabled = yes
    run at least every seconds = 1
[plugin:vllm]
    update every = 1
"""


class Agent:
    """One netdata process; `start()` returns once /api/v1/info answers."""

    def __init__(self, root: Path, vllm_conf: str, port: int | None = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pidfile = root / "run" / "netdata.pid"
        self.vllm_conf = vllm_conf

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> Path:
        for sub in ("etc/health.d", "stock/health.d", "log", "cache", "lib", "run", "plugins"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "etc" / "vllm.conf").write_text(self.vllm_conf)
        (self.root / "etc" / ".opt-out-from-anonymous-statistics").touch()
        conf = self.root / "netdata.conf"
        if layout.deb():  # Debian's own plugin and stock health directories, as the .deb installed into them
            conf.write_text(netdata_conf(self.root, self.port, layout.NETDATA_PLUGINS, layout.NETDATA_STOCK_HEALTH))
            return conf
        plugins = self.root / "plugins"
        # Our launcher, written by the installer operators use, with this interpreter pinned.
        subprocess.run([sys.executable, "-m", "check_vllm.netdata.install", str(plugins)], check=True,
                       capture_output=True, cwd=REPO)
        shutil.copy(CONTRIB / "health.d" / "vllm.conf", self.root / "etc" / "health.d" / "vllm.conf")
        conf.write_text(netdata_conf(self.root, self.port, plugins))
        return conf

    def start(self, timeout: float = 20.0) -> Agent:
        conf = self.prepare()
        env = dict(os.environ, DO_NOT_TRACK="1")
        self.proc = subprocess.Popen(
            [netdata_binary(), "-D", "-c", str(conf), "-P", str(self.pidfile), "-u", "root"],
            stdout=open(self.root / "log" / "stdout.log", "wb"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise NetdataError(f"netdata exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.get("/api/v1/info")
                return self
            except OSError:
                time.sleep(0.1)
        raise NetdataError(f"netdata did not answer on {self.base} within {timeout:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # netdata and the plugins it spawned (its own session)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=5) as resp:
            return json.loads(resp.read().decode())

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for name in ("error.log", "collector.log", "stdout.log"):
            path = self.root / "log" / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(out)

    def wait_for(self, what: str, probe: Any, timeout: float) -> Any:
        """Poll `probe()` until it returns something truthy; fail loudly with the agent's logs."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = probe()
            except OSError as err:
                last = err
            else:
                if last:
                    return last
            time.sleep(0.25)
        raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})\n{self.log_tail()}")
