"""One connection profile (issue 47): the check, the agent and a Netdata job reach the server the same way, from the
same option rows. Against a real https server on loopback whose certificate a private CA signed (a TLS-terminating
forwarder in front of the simulator, tests/rig/forwarder.py): without the CA every front end says unreachable
(a TLS problem of the monitoring side, never down), with it (`--ca-file`, `ca_file`) every one says idle; a two-line
key file sends its first line from all three; and a Netdata job that names the server's pid file tells starting
from down, as the check does. The installed check, the agent's and the Netdata plugin's own processes."""

from __future__ import annotations

import contextlib
import os
import select
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.contract.vocab import OK, UNKNOWN, WARNING
from check_vllm.netdata.install import install
from tests.e2e.test_agent_probes import running_agent, until
from tests.rig import private_ca
from tests.rig.forwarder import Recorder
from tests.rig.loading_vllm import free_port
from vllm_simulator import Simulator

KEY = "sk-first-line"


@pytest.fixture
def tls(sim: Simulator, tmp_path: Path) -> Iterator[tuple[Recorder, private_ca.PrivateCA, Path]]:
    """The https front of the idle simulator, its private CA, and a key file of two lines."""
    ca = private_ca.make(tmp_path / "pki")
    key = tmp_path / "key"
    key.write_text(f"{KEY}\nthis second line is no part of the key\n")
    rec = Recorder(sim.url, tls=ca.server_context())
    try:
        yield rec, ca, key
    finally:
        rec.close()


def netdata_state(tmp_path: Path, job: str, want: str | None = None, timeout: float = 15.0) -> tuple[str, str]:
    """The Netdata plugin's process with one job (`job`: its vllm.conf lines): the first state its charts set to 1
    (once it is `want`, when given), and what it logged."""
    tmp_path.mkdir()
    (tmp_path / "vllm.conf").write_text(f"[j]\n{job}\nupdate_every = 1\n")
    launcher = install(tmp_path / "plugins.d")
    proc = subprocess.Popen([str(launcher), "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, NETDATA_USER_CONFIG_DIR=str(tmp_path)), cwd=tmp_path)
    seen, inside, deadline = "", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not (seen and (want is None or seen == want)):
            if not select.select([proc.stdout], [], [], 1)[0]:
                continue
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if line.startswith("BEGIN "):
                inside = line.split()[1] == "vllm_j.state"
            elif inside and line.startswith("SET ") and line.split()[-1] != "0":
                seen = line.split()[1]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err
    return seen, err


def saying(url: str, path: str, word: str, timeout: float = 20.0) -> httpx.Response:
    """The agent's answer on `path` once its body names `word` (its first verdict is a reading away)."""
    deadline = time.monotonic() + timeout
    while True:
        got = httpx.get(f"{url}{path}", timeout=5)
        if word in got.text or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def test_a_private_ca_is_trusted_alike_by_the_check_the_agent_and_a_netdata_job(tls, run_check, tmp_path):
    rec, ca, key = tls
    # without the CA: the handshake fails on every front end, unreachable (the monitoring side), never down
    r = run_check("-u", rec.url, *FAST_ENOUGH, "--api-key-file", str(key))
    assert (r.code, r.word) == (UNKNOWN, "unreachable") and "TLS handshake failed" in r.status, r.out
    with running_agent(rec.url, "--api-key-file", str(key)) as agent:
        ready = saying(agent, "/readyz", "unreachable")
        # the monitoring side's fault fails no probe (docs/probes.md): it says so and passes
        assert ready.status_code == 200 and ready.text.startswith(
            "readiness pass in spite of: UNKNOWN unreachable: TLS handshake failed (CERTIFICATE_VERIFY_FAILED)"), \
            ready.text
    state, err = netdata_state(tmp_path / "nd0", f"url = {rec.url}\napi_key_file = {key}")
    assert state == "unreachable", err
    assert rec.seen == [], "nothing reached the server through a certificate no one trusted"

    # with the CA: idle on every front end, each sending the key file's first line
    r = run_check("-u", rec.url, *FAST_ENOUGH, "--api-key-file", str(key), "--ca-file", str(ca.ca))
    assert (r.code, r.word) == (OK, "idle"), r.out
    check_keys = _keys(rec)
    with running_agent(rec.url, "--api-key-file", str(key), "--ca-file", str(ca.ca)) as agent:
        ready = until(agent, "/readyz", 200)
        assert ready.status_code == 200 and ready.text.startswith("readiness pass: idle"), ready.text
    agent_keys = _keys(rec)
    state, err = netdata_state(tmp_path / "nd1", f"url = {rec.url}\napi_key_file = {key}\nca_file = {ca.ca}", "idle")
    assert state == "idle", err
    netdata_keys = _keys(rec)
    for front, keys in (("check", check_keys), ("agent", agent_keys), ("netdata", netdata_keys)):
        assert keys == {f"Bearer {KEY}"}, (front, keys)


def test_insecure_waives_the_check_alike(tls, run_check, tmp_path):
    rec, _, _ = tls
    r = run_check("-u", rec.url, *FAST_ENOUGH, "--insecure")
    assert (r.code, r.word) == (OK, "idle"), r.out
    with running_agent(rec.url, "--insecure") as agent:
        assert until(agent, "/readyz", 200).text.startswith("readiness pass: idle")
    assert netdata_state(tmp_path / "nd", f"url = {rec.url}\ninsecure = yes", "idle")[0] == "idle"


def test_a_netdata_job_with_the_servers_pid_file_tells_starting_from_down(tmp_path, run_check):
    """Nothing listens on the job's port; the pid file names a process that started a moment ago: starting (the
    model loads), as the check says with --pid-file; without it, down."""
    port = free_port()
    with _young_process() as pid:
        pid_file = tmp_path / "server.pid"
        pid_file.write_text(f"{pid}\n")
        url = f"http://127.0.0.1:{port}"
        r = run_check("-u", url, "--pid-file", str(pid_file))
        assert (r.code, r.word) == (WARNING, "starting") and "(from its pid file)" in r.status, r.out
        assert netdata_state(tmp_path / "with", f"url = {url}\npid_file = {pid_file}")[0] == "starting"
    assert netdata_state(tmp_path / "without", f"url = {url}")[0] == "down"


@contextlib.contextmanager
def _young_process() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "120"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _keys(rec: Recorder) -> set[str]:
    """The Authorization headers sent since the last call (requests without one left out), then forgotten."""
    keys = {k for k in rec.keys if k is not None}
    rec.keys.clear()
    rec.seen.clear()
    return keys


#: A quick check: no previous reading to wait for, the idle probe's own time-out short.
FAST_ENOUGH = ("--min-gap", "0.5", "--reread-delay", "1", "--probe-timeout", "5")


def test_the_forwarder_is_really_https(tls):
    """The test's own premise: plain http to it fails, https with the CA succeeds."""
    rec, ca, _ = tls
    with pytest.raises(httpx.HTTPError):
        httpx.get(rec.url.replace("https:", "http:") + "/metrics", timeout=5)
    trusted = ssl.create_default_context(cafile=str(ca.ca))
    assert httpx.get(rec.url + "/metrics", verify=trusted, timeout=5).status_code == 200


def test_a_ca_file_replaced_by_one_that_is_no_bundle_keeps_the_agents_trust(tls, tmp_path):
    """The agent's connection over a CA file rotated to something that is no PEM bundle: said, and the bundle
    before it still trusted, because a client loads the bytes that were checked, never the path again (a client
    made after the swap loaded the new file by path: ssl.SSLError, a traceback out of Endpoint.client)."""
    from check_vllm.cli.connection import Rotating
    from check_vllm.cli.option_table import AGENT
    from check_vllm.contract.defaults import SETTINGS, Options
    from check_vllm.contract.vocab import UNREACHABLE
    from check_vllm.haproxy.cli import parser
    from check_vllm.haproxy.watch import Watch

    rec, ca, key = tls
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(ca.ca.read_bytes())
    args = parser().parse_args(["-u", rec.url, "--api-key-file", str(key), "--ca-file", str(bundle)])
    said: list[str] = []
    rotating = Rotating(args, AGENT)
    watch = Watch(rotating.endpoint, SETTINGS, Options(), 1.0, 60.0, say=said.append, fresh=rotating.fresh)
    assert watch.judge().word != UNREACHABLE
    replaced = tmp_path / "ca.new"
    replaced.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    os.replace(replaced, bundle)
    kept = watch.judge()
    assert kept.word != UNREACHABLE, kept.text
    assert any("not a readable PEM CA bundle" in s and s.endswith("the connection before it is kept") for s in said), said
    with rotating.endpoint.client() as client:  # a client made now (a reconnect) trusts what was checked
        assert client.get(f"{rec.url}/v1/models", timeout=10).status_code == 200
