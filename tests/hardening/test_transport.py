"""Transport failures, end to end: refused, DNS, TLS, silent and stalling servers, redirects, API keys.

A name that does not resolve or a certificate that does not verify says nothing about the server: the
check must not call it down (CRITICAL), because the handler would restart a healthy server over a
resolver or CA-bundle problem; and it stays so run after run, with the eagerest proof rule.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.rig.waiting import wait_for
from vllm_simulator import Simulator

from .conftest import (
    CHECK,
    CRITICAL,
    FAST,
    OK,
    UNKNOWN,
    WARNING,
    Answer,
    Loopback,
    RawServer,
    answer,
    completion_answer,
    metrics_from,
    models_answer,
    read_request,
    sim_page,
)

SECRET = "sk-hardening-0123456789abcdef"
#: Stall proof as fast as it goes: one comparison without progress, no wall time, is stuck.
EAGER = ("--stuck-readings", "1", "--stuck-seconds", "0")


def _unreachable(r, cause: str) -> None:
    assert r.code == UNKNOWN, r.out
    assert r.first.startswith(f"VLLM UNKNOWN - unreachable: {cause}"), r.out


@pytest.fixture
def idle_page() -> Iterator[Loopback]:
    with Simulator(scenario="idle") as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim))}) as srv:
        yield srv


def test_connection_refused_is_down(check):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    r = check("-u", f"http://127.0.0.1:{port}", *FAST)
    assert (r.code, r.word) == (CRITICAL, "down"), r.out
    assert f"connection refused (http://127.0.0.1:{port})" in r.status


def test_dns_failure_is_unreachable_not_down(check):
    for _ in range(2):  # and stays so: a second run in a row is no more proof than the first
        r = check("-u", "http://vllm-host.invalid:8000", *EAGER, *FAST)
        _unreachable(r, "DNS lookup failed")


@pytest.mark.parametrize("scheduler_state", ["UNKNOWN", "CRITICAL"])
def test_handler_never_restarts_an_unreachable_server(check, restart, tmp_path, scheduler_state):
    """The verdict the check saved decides, not the state the scheduler passes: even a CRITICAL HARD
    event (a stale one, a forced state) does not restart over an unreachable verdict."""
    url = "http://vllm-host.invalid:8000"
    r = check("-u", url, *FAST)
    _unreachable(r, "DNS lookup failed")
    h = restart(url, state=scheduler_state)
    assert h.code == 0, h.out
    assert h.restarts == 0, h.out
    assert ": no restart: " in h.line, h.out
    assert "unreachable" in h.line or scheduler_state == "UNKNOWN", h.out


# --------------------------------------------------------------------------- TLS


def _self_signed(tmp: Path, names: tuple[str, ...] = ("localhost",), ips: tuple[str, ...] = ("127.0.0.1",)
                 ) -> tuple[Path, Path]:
    """A self-signed certificate (cryptography if installed, else the openssl CLI)."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        san = ",".join([*(f"DNS:{n}" for n in names), *(f"IP:{i}" for i in ips)])
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-days", "2", "-subj", f"/CN={names[0]}", "-addext", f"subjectAltName={san}",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        return cert, key
    k = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    alt = [*(x509.DNSName(n) for n in names), *(x509.IPAddress(ipaddress.ip_address(i)) for i in ips)]
    c = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(k.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.SubjectAlternativeName(alt), critical=False)
         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
         .sign(k, hashes.SHA256()))
    cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return cert, key


def _tls_server(tmp: Path, sim: Simulator, **names: tuple[str, ...]) -> tuple[Loopback, Path]:
    cert, key = _self_signed(tmp, **names)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return Loopback({"GET /metrics": metrics_from(sim_page(sim))}, tls=ctx), cert


def _verified_only(check, url: str, cert: Path, tls: Loopback) -> None:
    """`url` leads to `tls`, whose self-signed `cert` no default CA trusts: unreachable run after run,
    nothing sent to it, until --ca-file trusts it or --insecure waives the check."""
    for _ in range(2):
        r = check("-u", url, *EAGER, *FAST)
        _unreachable(r, "TLS handshake failed (CERTIFICATE_VERIFY_FAILED)")
    assert tls.seen == []
    r = check("-u", url, "--ca-file", str(cert), *FAST)
    assert (r.code, r.word) == (OK, "idle"), r.out
    r = check("-u", url, "--insecure", *FAST)
    assert (r.code, r.word) == (OK, "idle"), r.out


def test_tls_self_signed_without_ca_file_is_unreachable_not_down(check, tmp_path):
    with Simulator(scenario="idle") as sim:
        srv, cert = _tls_server(tmp_path, sim)
        with srv:
            _verified_only(check, srv.url, cert, srv)


def test_tls_certificate_for_another_name_is_unreachable_not_down(check, tmp_path):
    with Simulator(scenario="idle") as sim:
        srv, cert = _tls_server(tmp_path, sim, names=("vllm.example.com",), ips=())
        with srv:
            r = check("-u", srv.url, "--ca-file", str(cert), *FAST)
            _unreachable(r, "TLS handshake failed")


def test_https_url_on_a_plain_http_server_is_unreachable_not_down(check, idle_page):
    r = check("-u", idle_page.url.replace("http:", "https:"), *FAST)
    _unreachable(r, "TLS handshake failed")


def test_redirect_from_http_to_https_is_verified_not_trusted(check, tmp_path):
    """A plain-http URL loads no CA bundle, but a redirect to https must not slip past verification."""
    with Simulator(scenario="idle") as sim:
        tls, cert = _tls_server(tmp_path, sim)
        with tls, Loopback({"GET /metrics": _redirect(tls.url + "/metrics")}) as srv:
            _verified_only(check, srv.url, cert, tls)


@pytest.mark.parametrize("content", [b"this is not a certificate\n", None], ids=["not PEM", "missing"])
def test_bad_ca_file_is_a_usage_error(check, idle_page, tmp_path, content):
    bad = tmp_path / "ca.pem"
    if content is not None:
        bad.write_bytes(content)
    r = check("-u", idle_page.url.replace("http:", "https:"), "--ca-file", str(bad), *FAST)
    assert r.code == 3 and r.first.startswith(f"VLLM UNKNOWN - usage: --ca-file {bad}: not a readable"), r.out


# --------------------------------------------------------------------------- servers that do not answer


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait()


def _headers_then_stall(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
                 b'vllm:num_requests_running{engine="0"} 2.0\n')
    stop.wait()


def _drip(conn: socket.socket, stop: threading.Event) -> None:
    """A byte at a time, forever: every read succeeds, so only a whole-exchange deadline ends it."""
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000000\r\n\r\n")
    while not stop.wait(0.2):
        conn.sendall(b"#")


@pytest.mark.parametrize("serve,must_say", [
    (None, "timed out"),  # listens, the kernel accepts, the program never does
    (_silent, "timed out"),  # accepts and never answers
    (_headers_then_stall, "timed out"),  # answers headers, then stalls the body
    (_drip, "body still arriving"),  # drips the body a byte at a time
], ids=["never accepted", "accepts, never answers", "headers then stall", "drips the body"])
def test_silent_servers_are_unresponsive_within_the_timeout(check, serve, must_say):
    with RawServer(serve) as srv:
        r = check("-u", srv.url, "-t", "4", *FAST)
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        assert "GET /metrics" in r.status and must_say in r.status, r.out
        # the bound is the product's own figure: -t 4, the run's whole budget, x5; these servers hold on for ever
        assert r.seconds < 5 * 4, r.seconds


# --------------------------------------------------------------------------- redirects


def _redirect(to: str) -> object:
    return lambda h: answer(302, b"", "text/plain", Location=to)


def test_redirects_are_followed_a_few_times(check):
    with Simulator(scenario="busy") as sim, Loopback({
        "GET /metrics": _redirect("/a"), "GET /a": _redirect("/b"), "GET /b": metrics_from(sim_page(sim)),
    }) as srv:
        r = check("-u", srv.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
        assert (r.code, r.word) == (OK, "busy"), r.out


def test_redirect_loop_is_no_metrics_not_unresponsive(check):
    """A loop is a wrong URL or a proxy rule, not a server in trouble: never a restartable verdict."""
    with Loopback({"GET /metrics": _redirect("/loop"), "GET /loop": _redirect("/metrics")}) as srv:
        for _ in range(3):
            r = check("-u", srv.url, "--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
            assert (r.code, r.word) == (WARNING, "no metrics"), r.out
            assert "too many redirects" in r.status
        assert srv.paths().count("GET /metrics") + srv.paths().count("GET /loop") <= 3 * 5


def test_redirect_to_another_scheme_is_no_metrics(check):
    with Loopback({"GET /metrics": _redirect("ftp://127.0.0.1/metrics")}) as srv:
        r = check("-u", srv.url, *FAST)
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out


def test_api_key_is_not_sent_to_another_origin_on_redirect(check):
    with Loopback() as elsewhere, Loopback({
        "GET /metrics": lambda h: answer(200, "<html/>", "text/html"),
        "GET /v1/models": _redirect(elsewhere.url + "/v1/models"),
    }) as srv:
        r = check("-u", srv.url, *FAST, env={"VLLM_API_KEY": SECRET})
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert srv.seen[-1].headers.get("Authorization") == f"Bearer {SECRET}"
        assert elsewhere.seen and all("Authorization" not in s.headers for s in elsewhere.seen)


# --------------------------------------------------------------------------- API keys


def _keyed(status: int = 401, hold: threading.Event | None = None):
    """An OpenAI route that wants `Bearer SECRET`, and (like some proxies) echoes what it was given."""
    def route(h: BaseHTTPRequestHandler) -> Answer:
        given = h.headers.get("Authorization", "")
        if hold is not None:
            hold.wait(10)
        if given != f"Bearer {SECRET}":
            msg = {"error": {"message": f"invalid api key: {given or 'none'}", "type": "auth"}}
            return answer(status, json.dumps(msg), "application/json")
        return models_answer() if h.command == "GET" else completion_answer()
    return route


def _all_text(r, state_dir: Path) -> str:
    files = "".join(p.read_text(errors="replace") for p in state_dir.glob("*") if p.is_file())
    return r.out + r.err + files


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("key", [None, "sk-wrong-key-9876543210", SECRET], ids=["no key", "wrong key", "right key"])
def test_probe_rejected_for_the_key_is_a_warning_and_no_key_leaks(check, tmp_path, status, key):
    with Simulator(scenario="idle") as sim, Loopback({
        "GET /metrics": metrics_from(sim_page(sim)), "GET /v1/models": _keyed(status),
        "POST /v1/completions": _keyed(status),
    }) as srv:
        env = {"VLLM_API_KEY": key} if key else {"VLLM_API_KEY": ""}
        r = check("-u", srv.url, "-v", *FAST, env=env)
        if key == SECRET:
            assert (r.code, r.word) == (OK, "idle"), r.out
        else:
            assert (r.code, r.word) == (WARNING, "idle"), r.out
            assert f"probe was rejected: completion answered HTTP {status}" in r.status, r.out
        leaked = _all_text(r, tmp_path / "state")
        assert SECRET not in leaked
        if key:
            assert key not in leaked, "the key the server echoed back reached output or state"


def test_key_file_and_ps(check, tmp_path):
    """The key comes from a file or the environment, so `ps` (the command line) never shows it."""
    keyfile = tmp_path / "key"
    keyfile.write_text(SECRET + "\n")
    keyfile.chmod(0o600)
    hold = threading.Event()
    with Simulator(scenario="idle") as sim, Loopback({
        "GET /metrics": metrics_from(sim_page(sim)), "POST /v1/completions": _keyed(hold=hold),
    }) as srv:
        for how, extra, env in (("file", ["--api-key-file", str(keyfile)], {}),
                                ("env", [], {"VLLM_API_KEY": SECRET})):
            hold.clear()
            time.sleep(0.4)  # past --min-gap, so the run judges afresh and probes
            proc = subprocess.Popen([CHECK, "--state-dir", str(tmp_path / "state"), "-u", srv.url, *extra, *FAST],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env={**os.environ, **env})
            try:
                wait_for("the run's probe", lambda: any(s.path == "/v1/completions" for s in srv.seen), 60,
                         interval=0.02)
                cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()  # what ps shows
                assert SECRET.encode() not in cmdline, how
                probes = [s for s in srv.seen if s.path == "/v1/completions"]
                assert probes and probes[-1].headers.get("Authorization") == f"Bearer {SECRET}", how
            finally:
                hold.set()
                out, err = proc.communicate(timeout=30)
            srv.seen.clear()
            assert proc.returncode == OK and out.startswith("VLLM OK - idle"), (how, out, err)
            assert SECRET not in out + err


def test_api_key_on_the_command_line_is_refused(check):
    r = check("--api-key", SECRET, "-u", "http://127.0.0.1:9")
    assert r.code == 3 and r.first.startswith("VLLM UNKNOWN - usage:"), r.out
    assert SECRET not in r.out + r.err
