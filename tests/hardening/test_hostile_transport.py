"""Failures on the monitoring side of the wire, and a compressed page cut short, end to end.

A name that does not resolve or a certificate that does not verify says nothing about the server: the
check must not call it down (CRITICAL), because the handler would restart a healthy server over a
resolver or CA-bundle problem. A gzip stream cut inside a correctly framed body is half a page: it
proves nothing, and must not be judged as a reading.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from vllm_simulator import Simulator

from .conftest import CRITICAL, FAST, OK, UNKNOWN, Answer, Loopback, answer
from .test_transport import _tls_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real"
#: Stall proof as fast as it goes: one comparison without progress, no wall time, is stuck.
EAGER = ("--stuck-readings", "1", "--stuck-seconds", "0")
#: The default proof rule (2 readings over 120 s): what "never CRITICAL over two runs" is held to.
RUN = FAST


def _unreachable(r, cause: str) -> None:
    assert r.code == UNKNOWN, r.out
    assert r.first.startswith(f"VLLM UNKNOWN - unreachable: {cause}"), r.out


# --------------------------------------------------------------------------- DNS and TLS: unreachable, never down


def test_dns_failure_is_unreachable_not_down(check):
    for _ in range(2):  # and stays so: a second run in a row is no more proof than the first
        r = check("-u", "http://vllm-host.invalid:8000", *EAGER, *FAST)
        _unreachable(r, "DNS lookup failed")


def test_self_signed_certificate_is_unreachable_not_down(check, tmp_path):
    with Simulator(scenario="idle") as sim:
        srv, cert = _tls_server(tmp_path, sim)
        with srv:
            for _ in range(2):
                r = check("-u", srv.url, *EAGER, *FAST)
                _unreachable(r, "TLS handshake failed")
                assert "CERTIFICATE_VERIFY_FAILED" in r.status, r.out
            assert srv.seen == []  # no request went over the unverified connection
            r = check("-u", srv.url, "--ca-file", str(cert), *FAST)  # the same server, properly trusted
            assert (r.code, r.word) == (OK, "idle"), r.out


def test_certificate_for_another_name_is_unreachable(check, tmp_path):
    with Simulator(scenario="idle") as sim:
        srv, cert = _tls_server(tmp_path, sim, names=("vllm.example.com",), ips=())
        with srv:
            r = check("-u", srv.url, "--ca-file", str(cert), *FAST)
            _unreachable(r, "TLS handshake failed")


def test_https_to_a_plain_http_server_is_unreachable(check):
    with Simulator(scenario="idle") as sim:
        r = check("-u", sim.url.replace("http:", "https:"), *FAST)
        _unreachable(r, "TLS handshake failed")


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


# --------------------------------------------------------------------------- a compressed page cut short


def _page(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data, 6)  # Content-Encoding: deflate is the zlib container


def _serve(pages: list[tuple[bytes, str]]) -> Callable[[BaseHTTPRequestHandler], Answer]:
    """/metrics answers the listed bodies in turn (the last one from then on), each with its
    Content-Encoding and a Content-Length that matches exactly what is sent."""
    served = [0]

    def route(h: BaseHTTPRequestHandler) -> Answer:
        body, encoding = pages[min(served[0], len(pages) - 1)]
        served[0] += 1
        return answer(200, body, "text/plain; version=0.0.4; charset=utf-8", Content_Encoding=encoding)

    return route


@pytest.fixture
def gz_pages() -> Iterator[tuple[bytes, bytes]]:
    yield gzip.compress(_page("saturated.txt")), gzip.compress(_page("saturated_b.txt"))


CUTS = {  # where the second page is cut: inside the header, in the middle, inside the 8-byte CRC/size trailer
    "in the gzip header": lambda n: 6,
    "after a tenth": lambda n: n // 10,
    "halfway": lambda n: n // 2,
    "nine tenths": lambda n: n * 9 // 10,
    "inside the trailer": lambda n: n - 4,
    "last byte missing": lambda n: n - 1,
}


@pytest.mark.parametrize("cut", list(CUTS.values()), ids=list(CUTS))
def test_cut_gzip_body_is_no_reading(check, gz_pages, cut):
    first, second = gz_pages
    cut_second = second[:cut(len(second))]
    with Loopback({"GET /metrics": _serve([(first, "gzip"), (second, "gzip"), (cut_second, "gzip")])}) as srv:
        r = check("-u", srv.url, *RUN)  # two whole pages (a first reading, then a re-read): busy
        assert (r.code, r.word) == (OK, "busy"), r.out
        for _ in range(2):
            r = check("-u", srv.url, *RUN)
            assert r.code != CRITICAL, r.out
            assert "compressed body that ends early" in r.status, r.out
            assert r.word not in ("busy", "stalling", "stuck", "idle", "restarted"), r.out  # judged as no reading


def test_cut_deflate_body_is_no_reading(check):
    first, second = _deflate(_page("saturated.txt")), _deflate(_page("saturated_b.txt"))
    pages = [(first, "deflate"), (second, "deflate"), (second[: len(second) // 2], "deflate")]
    with Loopback({"GET /metrics": _serve(pages)}) as srv:
        r = check("-u", srv.url, *RUN)
        assert (r.code, r.word) == (OK, "busy"), r.out
        for _ in range(2):
            r = check("-u", srv.url, *RUN)
            assert r.code != CRITICAL and "compressed body that ends early" in r.status, r.out
