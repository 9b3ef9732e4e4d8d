"""Same-host reverse proxies in front of vLLM, real ones (issue 38, cases 1 and 3): Debian's Caddy 2.6 and nginx
1.22, started here on loopback with their own configs.

1. Caddy with an active health check (`health_uri /health`) marks its upstream down when one check times out (a
   vLLM whose event loop stalls a few seconds under a long batch) and then answers every path, /health included,
   with an empty 503. f646aaa read that as vLLM's dead engine: `CRITICAL down: engine died`, restarted at once.
   Here the health check is pointed at a listener that never answers (`health_port`), so the upstream, a busy
   simulator, is healthy while Caddy says it is not.
3. nginx in front of a vLLM that loads (bound, not listening: every connection refused, as vLLM's are while its
   engine builds) answers 502. f646aaa said `unresponsive` and nothing else, and proved it after --stuck-seconds;
   the output now names nginx; with no option the one engine server on this host, young, is the witness of its
   start (issue 46, case 4), and `--server-port` makes the loading process the
   witness: `starting`, never CRITICAL while it loads.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.loading_vllm import Loaders, loaders
from tests.rig.ports import free_port
from tests.rig.scripts import run_check
from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

from .common import CRITICAL, OK, WARNING

pytestmark = pytest.mark.fleet

FAST = ("--min-gap", "0.3", "--reread-delay", "0.4")


def _listening(port: int, timeout: float = 15.0) -> None:
    def accepts() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), 0.3).close()
            return True
        except OSError:
            return False

    wait_for(f"a listener on 127.0.0.1:{port}", accepts, timeout, 0.1)


def _binary(path: str) -> str:
    if not shutil.which(path):
        pytest.fail(f"{path} is not installed: run .ci/fleet-deps.sh", pytrace=False)
    return path


@pytest.fixture
def busy_sim() -> Iterator[Simulator]:
    with Simulator(scenario="busy") as sim:
        yield sim


@pytest.fixture
def caddy(busy_sim: Simulator, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """Caddy before the busy simulator, its active health check pointed at a port that accepts and never
    answers: the upstream is marked down as a stalled event loop would have it marked."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog), never answers
    front, back = free_port(), busy_sim.port
    (tmp_path / "Caddyfile").write_text(f"""{{
    admin off
    auto_https off
}}
http://127.0.0.1:{front} {{
    bind 127.0.0.1
    reverse_proxy 127.0.0.1:{back} {{
        health_uri /health
        health_port {silent.getsockname()[1]}
        health_interval 500ms
        health_timeout 1s
    }}
}}
""")
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([_binary("/usr/bin/caddy"), "run", "--config", str(tmp_path / "Caddyfile"),
                             "--adapter", "caddyfile"], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "caddy.log", "wb"))
    try:
        _listening(front)
        yield f"http://127.0.0.1:{front}", proc
    finally:
        proc.terminate()
        proc.wait(10)
        silent.close()


def _caddy_says_503(url: str, timeout: float = 15.0) -> tuple[int, bytes]:
    """Wait until Caddy has marked its upstream down: GET /health answers its own empty 503."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                got = (resp.status, resp.read())
        except urllib.error.HTTPError as err:
            got = (err.code, err.read())
        if got[0] == 503 or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_caddys_empty_503_for_a_busy_healthy_vllm_is_unresponsive_not_a_dead_engine(caddy, busy_sim, tmp_path):
    url, _ = caddy
    status, body = _caddy_says_503(url)
    assert (status, body) == (503, b""), "Caddy did not mark its upstream down with an empty 503"
    r = run_check(tmp_path / "state", "-u", url, *FAST)
    assert r.code == WARNING and r.first.startswith("VLLM WARNING - unresponsive: /metrics answered HTTP 503"), r.first
    assert "engine died" not in r.first
    live = run_check(tmp_path / "state", "--probe", "liveness", "-u", url, *FAST)
    assert live.code == 0 and live.out.startswith("liveness pass in spite of: WARNING unresponsive: "), live.out
    direct = run_check(tmp_path / "direct", "-u", busy_sim.url, *FAST)
    assert direct.code == OK, direct.first  # the server itself was busy and healthy all along


NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{front};
        location / {{ proxy_pass http://127.0.0.1:{back}; }}
    }}
}}
"""


@pytest.fixture
def loader(tmp_path: Path) -> Iterator[Loaders]:
    yield from loaders(tmp_path / "loaders")


@pytest.fixture
def nginx_before_a_load(tmp_path: Path, loader: Loaders) -> Iterator[tuple[str, int, int, subprocess.Popen]]:
    front, back = free_port(), free_port()
    proc_vllm = loader(back)
    root = tmp_path / "nginx"
    root.mkdir()
    (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, front=front, back=back))
    proc = subprocess.Popen([_binary("/usr/sbin/nginx"), "-p", str(root), "-c", str(root / "nginx.conf")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _listening(front)
        yield f"http://127.0.0.1:{front}", back, proc_vllm.pid, proc
    finally:
        proc.terminate()
        proc.wait(10)


def test_behind_nginx_a_loading_vllm_is_starting_once_named_and_never_critical(nginx_before_a_load, tmp_path):
    url, back, pid, nginx = nginx_before_a_load
    blind = []  # no option (issue 46, case 4): the one engine server on this host, young, witnesses its start
    for _ in range(6):
        blind.append(run_check(tmp_path / "blind", "-u", url, "--stuck-seconds", "2", "--stuck-readings", "2", *FAST))
        time.sleep(0.5)
    assert all(r.code == WARNING and r.word == "starting" for r in blind), [r.first for r in blind]
    assert blind[-1].status.startswith(f"starting: vLLM process {pid} (from its command line: the one engine server "
                                       f"on this host, port {back}, behind the URL's: port "), blind[-1].first
    assert "is held by nginx (pid " in blind[-1].first and "name it with --server-port to be sure" in blind[-1].first, \
        blind[-1].first
    runs = []
    for _ in range(6):  # past --stuck-seconds 2 twice over: a proof would have been made by now
        runs.append(run_check(tmp_path / "named", "-u", url, "--server-port", str(back), "--stuck-seconds", "2",
                              "--stuck-readings", "2", *FAST))
        time.sleep(0.5)
    assert all(r.code == WARNING and r.word == "starting" for r in runs), [r.first for r in runs]
    assert runs[-1].status.startswith(f"starting: vLLM process {pid} started "), runs[-1].first
    assert not any(r.code == CRITICAL for r in runs)
