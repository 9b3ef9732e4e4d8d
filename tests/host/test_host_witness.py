"""The host's witness takes other users' processes and files as input (issue 38, cases 2 and 3).

Case 2: any local user could start `... vllm serve --config FIFO` and make every look at the host block (the
check UNKNOWN on a dead server, never down; the agent deaf), or, as root, open a device. A --config is now
read only when it is a regular file of the process's user or root, never opened otherwise; --server-user
makes only that user's processes count. Case 3: behind a same-host proxy, the one vLLM API server of the
server's user is the witness, said so; several are named for the operator to choose.

A second user is nobody (setpriv, root only); the proxy cases run in a network namespace of their own
(unshare, nsenter: root only), so no other test's vLLM stand-in on this host is a candidate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.loading_vllm import PROXY, SCRIPT
from tests.rig.ports import free_port
from tests.rig.scripts import Result, run_script

pytestmark = [
    pytest.mark.host,  # run alone (tox -e py3's second command): these look-alikes blind other tests' host
    pytest.mark.skipif(os.geteuid() != 0 or not all(map(shutil.which, ("setpriv", "unshare", "nsenter"))),
                       reason="needs root, setpriv, unshare and nsenter: a second user, a namespace"),
]

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
SLEEPER = "import time; time.sleep(120)"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_fifo_named_as_config_by_another_user_is_never_opened_and_blocks_nothing(tmp_path: Path, spawned):
    tmp_path.chmod(0o755)
    fifo = tmp_path / "vllm.yaml"
    os.mkfifo(fifo, 0o666)
    spawned.append(subprocess.Popen([*NOBODY, sys.executable, "-c", SLEEPER, "vllm", "serve", "--config", str(fifo)]))
    opened = threading.Event()
    writer = threading.Thread(target=lambda: (open(fifo, "w").close(), opened.set()), daemon=True)
    writer.start()  # blocks until someone opens the FIFO to read
    time.sleep(0.3)
    port = free_port()
    started = time.monotonic()
    r = run_script("check_vllm", "-u", f"http://127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"), "-t", "10")
    took = time.monotonic() - started
    assert (r.code, r.word) == (2, "down"), r.first
    assert took < 5, f"the check took {took:.1f} s"
    assert not opened.is_set(), "the check opened another user's FIFO"
    with open(fifo):  # let the writer go
        pass


def test_another_users_process_counts_only_without_server_user(tmp_path: Path, spawned):
    """Nobody's `vllm serve --port P` on a dead server's port: believed by default (a loading server: starting,
    as before), ignored with --server-user root."""
    port = free_port()
    spawned.append(subprocess.Popen([*NOBODY, sys.executable, "-c", SLEEPER, "vllm", "serve", "--port", str(port)]))
    time.sleep(0.3)
    url = f"http://127.0.0.1:{port}"
    believed = run_script("check_vllm", "-u", url, "--state-dir", str(tmp_path / "a"))
    assert (believed.code, believed.word) == (1, "starting"), believed.first
    ignored = run_script("check_vllm", "-u", url, "--state-dir", str(tmp_path / "b"), "--server-user", "root")
    assert (ignored.code, ignored.word) == (2, "down"), ignored.first
    unknown = run_script("check_vllm", "-u", url, "--state-dir", str(tmp_path / "c"), "--server-user", "no-such-user")
    assert "server process unknown: --server-user no-such-user: no such user here" in unknown.first, unknown.first




class Namespace:
    """A network namespace of its own, held by a proxy answering 502 on `front`; what runs in it goes through
    nsenter."""

    def __init__(self, tmp_path: Path, comm: str = "nginx") -> None:
        self.front = free_port()
        # the stand-in proxy goes by a reverse proxy's program name (its comm), as the host sees one; the real
        # nginx before a loading server is the fleet tier's (tests/fleet/test_proxies.py)
        named = f"open('/proc/self/comm', 'w').write({comm!r})\n{PROXY}"
        self.proxy = subprocess.Popen(["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                                       sys.executable, "-c", named, str(self.front)])
        self.enter = ("nsenter", f"--net=/proc/{self.proxy.pid}/ns/net")
        self.vllm = tmp_path / "bin" / "vllm"
        self.vllm.parent.mkdir(parents=True, exist_ok=True)
        self.vllm.write_text(SCRIPT)
        self.loaders: list[subprocess.Popen] = []
        deadline = time.monotonic() + 10
        while subprocess.run([*self.enter, sys.executable, "-c", "import socket,sys; socket.create_connection("
                              f"('127.0.0.1', {self.front}), 0.5)"], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the proxy in the namespace did not listen"
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.front}"

    def loader(self, port: int) -> subprocess.Popen:
        proc = subprocess.Popen([*self.enter, sys.executable, str(self.vllm), "serve", "tiny", "--port", str(port)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "bound"
        self.loaders.append(proc)
        return proc

    def check(self, state: Path, *args: str) -> Result:
        return run_script("check_vllm", "-u", self.url, "--state-dir", str(state), *args, prefix=self.enter)

    def close(self) -> None:
        for proc in [*self.loaders, self.proxy]:
            proc.kill()
            proc.wait()


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(tmp_path)
    yield made
    made.close()


def test_behind_a_local_proxy_the_one_vllm_of_the_servers_user_witnesses_its_load(ns: Namespace, tmp_path: Path):
    """f646aaa: `unresponsive: /metrics answered HTTP 502`, CRITICAL after --stuck-seconds, restarted mid-load."""
    back = free_port()
    proc = ns.loader(back)
    r = ns.check(tmp_path / "s1", "--server-user", "root")
    assert (r.code, r.word) == (1, "starting"), r.first
    assert r.status.startswith(f"starting: vLLM process {proc.pid} (from its command line: the one engine server "
                               f"of its user here, port {back}, behind the URL's: port {ns.front} is held by "), r.first
    assert "not serving yet" in r.status, r.first


def test_behind_a_local_proxy_two_servers_of_the_user_are_named_not_guessed(ns: Namespace, tmp_path: Path):
    ports = sorted((free_port(), free_port()))
    for port in ports:
        ns.loader(port)
    r = ns.check(tmp_path / "s2", "--server-user", "root")
    assert (r.code, r.word) == (1, "unresponsive"), r.first
    assert (f"this user's engine servers here serve ports {ports[0]}, {ports[1]}: name the one behind it with "
            "--server-port") in r.status, r.first
    named = ns.check(tmp_path / "s3", "--server-port", str(ports[1]))
    assert named.word == "starting" and f"vLLM process {ns.loaders[1].pid} started" in named.status, named.first


def test_behind_a_local_proxy_with_no_option_the_one_engine_server_here_witnesses_its_start(ns: Namespace,
                                                                                          tmp_path: Path):
    """Issue 46, case 4: the shipped defaults, no option naming the server. 4e70de5 said `unresponsive`, then
    CRITICAL after --stuck-seconds: a restart mid-load. Exactly one engine server here, young: `starting`, said
    how it was chosen, and never CRITICAL while it loads."""
    back = free_port()
    proc = ns.loader(back)
    runs = []
    for _ in range(6):  # past --stuck-seconds 2 twice over
        runs.append(ns.check(tmp_path / "s4", "--stuck-seconds", "2", "--stuck-readings", "2", "-t", "5"))
        time.sleep(0.5)
    assert all((r.code, r.word) == (1, "starting") for r in runs), [r.first for r in runs]
    assert runs[-1].status.startswith(f"starting: vLLM process {proc.pid} (from its command line: the one engine "
                                      f"server on this host, port {back}, behind the URL's: port {ns.front} is held "
                                      "by "), runs[-1].first
    assert "name it with --server-port to be sure" in runs[-1].status, runs[-1].first


def test_the_guess_proves_a_start_only(ns: Namespace, tmp_path: Path):
    """Past its start grace the one engine server here is no proof of anything: the proxy's 502 is judged as it
    was (unresponsive, CRITICAL once proven), never `down` on a guess."""
    ns.loader(free_port())
    time.sleep(1.2)
    runs = []
    for _ in range(8):
        runs.append(ns.check(tmp_path / "s5", "--start-grace", "1", "--stuck-seconds", "1", "--stuck-readings", "2",
                             "-t", "5"))
        if runs[-1].code == 2:
            break
        time.sleep(0.5)
    assert all(r.word == "unresponsive" for r in runs), [r.first for r in runs]
    assert runs[-1].code == 2, [r.first for r in runs]


def test_a_program_that_is_no_reverse_proxy_is_no_reason_to_guess(tmp_path: Path):
    """Only behind a reverse proxy's 5xx (its program's name) is the one engine server here the guess: any other
    program answering 502 on the URL's port (an application, a test's stand-in) says what holds the port and how
    to name the server, as before."""
    other = Namespace(tmp_path, comm="python3")
    try:
        other.loader(free_port())
        r = other.check(tmp_path / "s7")
        assert (r.code, r.word) == (1, "unresponsive"), r.first
        assert "is held by python3 (pid " in r.status and "name the server behind it with --server-port" in r.status, \
            r.first
    finally:
        other.close()


def test_behind_a_local_proxy_with_no_option_several_engine_servers_are_listed_not_guessed(ns: Namespace,
                                                                                         tmp_path: Path):
    ports = sorted((free_port(), free_port()))
    pids = [ns.loader(port).pid for port in ports]
    r = ns.check(tmp_path / "s6")
    assert (r.code, r.word) == (1, "unresponsive"), r.first
    assert (f"this host's engine servers: port {ports[0]} (pid {pids[0]}), port {ports[1]} (pid {pids[1]}): name "
            "the one behind it with --server-port") in r.status, r.first
