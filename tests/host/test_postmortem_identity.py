"""Whose processes a root post-mortem dumps (issue 51): the one holding the server's listening socket, never a
look-alike by its command line. Tried as a hostile local user would: a program named like the server for the
same port, started before the real one (the oldest, which the witness's command-line rule prefers); a pid file
left naming it; the real server run by another user; a planted native program that writes a marker if anyone
runs it. Real processes, root, a second user (nobody, by setpriv)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Options
from check_vllm.postmortem import dumpers
from check_vllm.postmortem.collect import collect
from check_vllm.postmortem.identity import server
from tests.rig.ports import free_port

pytestmark = [
    pytest.mark.host,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("cc"),
                       reason="needs root, setpriv (a second user) and cc (a planted native program)"),
]

NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
#: A server look-alike that holds its --port (argv: ... vllm serve --port P [--listen]) and says when it is ready.
SERVER = """
import socket, sys, time
if "--listen" in sys.argv:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])))
    s.listen()
print("in", flush=True)
time.sleep(300)
"""
#: A native program named llama-server: it writes a marker next to itself whenever it is run with --version.
PLANTED_C = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--version")) {
        FILE *f = fopen(MARKER, "w"); if (f) { fputs("run\n", f); fclose(f); } return 0; }
    sleep(300); return 0;
}
"""


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def start(procs: list[subprocess.Popen], *argv: str) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"in\n"
    return proc


def test_a_planted_look_alike_older_than_the_server_is_never_named(spawned):
    port = free_port()
    planted = start(spawned, *NOBODY, sys.executable, "-c", SERVER, "vllm", "serve", "--port", str(port))
    time.sleep(0.05)  # older by its start time
    real = start(spawned, sys.executable, "-c", SERVER, "vllm", "serve", "--port", str(port), "--listen")
    named = server(f"http://127.0.0.1:{port}", Options())
    assert named.pids == [real.pid] and named.how == f"holding port {port}", (named, planted.pid)


def test_a_pid_file_naming_a_process_that_holds_no_port_is_refused(spawned, tmp_path: Path):
    port = free_port()
    planted = start(spawned, sys.executable, "-c", SERVER, "vllm", "serve", "--port", str(port))
    start(spawned, sys.executable, "-c", SERVER, "vllm", "serve", "--port", str(port), "--listen")
    pid_file = tmp_path / "vllm.pid"
    pid_file.write_text(f"{planted.pid}\n")
    named = server(f"http://127.0.0.1:{port}", Options(pid_file=str(pid_file)))
    assert named.pids == [], named
    assert named.how == (f"process {planted.pid} named by --pid-file holds no listening socket on port {port}, nor "
                         "does a child of it: not dumped (a stale pid file whose pid was reused, or another program)")


def test_a_pid_file_naming_the_servers_parent_is_taken(spawned, tmp_path: Path):
    port = free_port()
    wrapper = subprocess.Popen(["sh", "-c", f'{sys.executable} -c \'{SERVER}\' vllm serve --port {port} --listen; :'],
                               stdout=subprocess.PIPE, start_new_session=True)
    spawned.append(wrapper)
    assert wrapper.stdout is not None and wrapper.stdout.readline() == b"in\n"
    pid_file = tmp_path / "vllm.pid"
    pid_file.write_text(f"{wrapper.pid}\n")
    named = server(f"http://127.0.0.1:{port}", Options(pid_file=str(pid_file)))
    assert named.pids == [wrapper.pid] and named.how == "named by --pid-file, holding the server's port", named
    os.killpg(wrapper.pid, 9)  # the server under the wrapper too


def test_another_users_server_is_dumped_only_when_server_user_names_that_user(spawned):
    port = free_port()
    real = start(spawned, *NOBODY, sys.executable, "-c", SERVER, "vllm", "serve", "--port", str(port), "--listen")
    url = f"http://127.0.0.1:{port}"
    refused = server(url, Options())
    assert refused.pids == [] and refused.how == (
        f"process {real.pid} holds the server's port but belongs to uid 65534, not to this user (uid 0): not "
        "dumped; name the server's user with --server-user to have it dumped"), refused
    assert server(url, Options(server_user="nobody")).pids == [real.pid]
    assert server(url, Options(server_user="65534")).pids == [real.pid]


def test_a_root_post_mortem_runs_no_file_of_a_process_it_reads(spawned, tmp_path: Path):
    """The planted program is another user's file: collecting its process (as a pid given directly: the identity
    rule above would not even name it) reads /proc and dumps its stacks, and never runs it."""
    planted_dir = tmp_path / "planted"
    planted_dir.mkdir()
    marker = planted_dir / "ran"
    source = planted_dir / "llama-server.c"
    source.write_text(PLANTED_C.replace("MARKER", f'"{marker}"'))
    exe = planted_dir / "llama-server"
    subprocess.run(["cc", "-O0", "-o", str(exe), str(source)], check=True)
    os.chown(exe, 65534, 65534)
    os.chmod(planted_dir, 0o777)
    proc = subprocess.Popen([*NOBODY, str(exe), "--port", str(free_port())])
    spawned.append(proc)
    time.sleep(0.3)
    result = collect(tmp_path / "pm", [proc.pid], None, {"verdict": "stuck"}, budget=10, tools=dumpers.find())
    assert result.path is not None, result.steps
    assert not marker.exists(), "root ran the planted program"
    versions = (result.path / "versions.txt").read_text()
    assert f"pid {proc.pid}: llama.cpp {exe} (never run to ask its version)" in versions, versions
