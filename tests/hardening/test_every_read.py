"""Every read of a run meets every kind of failure the same way (issue 12 part 2), end to end.

A run reads /metrics up to twice: the first read, the re-read when the first showed work without a
baseline, and the re-read after an unanswered idle probe. Whichever read finds no vLLM page, the run
asks /v1/models for liveness before saying anything, and says CRITICAL only when /v1/models was asked
and failed over the proof (here the most trigger-happy one: 1 reading, 0 s).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from .conftest import CRITICAL, FAST, WARNING, Answer, Loopback, answer, completion_answer, models_answer

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TRIGGER_HAPPY = ("--stuck-readings", "1", "--stuck-seconds", "0", *FAST, "--probe-timeout", "2", "-t", "12")
DEFAULT_PROOF = (*FAST, "--probe-timeout", "2", "-t", "12")  # 2 readings over 120 s: one run proves nothing


def page(name: str) -> Answer:
    return answer(200, (PAGES / f"{name}.txt").read_bytes(), "text/plain; version=0.0.4; charset=utf-8")


def _drop(h: BaseHTTPRequestHandler) -> None:
    h.close_connection = True  # accept, read the request, close without a word


FAILURES: dict[str, Callable[[BaseHTTPRequestHandler], Answer | None]] = {
    "html 200": lambda h: answer(200, "<html><body>502 Bad Gateway</body></html>", "text/html"),
    "404": lambda h: answer(404, '{"detail":"Not Found"}', "application/json"),
    "500": lambda h: answer(500, "Internal Server Error"),
    "dropped": _drop,
}
#: The word each failure earns when /v1/models answers: a page that is not vLLM's, or a server that did not answer.
WORD = {"html 200": "no metrics", "404": "no metrics", "500": "unresponsive", "dropped": "unresponsive"}

#: Which read fails, and what the reads before it served. "probe" answers 503 so the run re-reads.
READS = {
    "first read": ([], None),
    "re-read of a first reading with work": (["saturated"], None),
    "re-read after an unanswered probe": (["idle"], lambda h: answer(503, '{"error":{"message":"overloaded"}}',
                                                                     "application/json")),
}


def server(before: list[str], failure: Callable, probe: Callable | None, models_ok: bool) -> Loopback:
    reads = itertools.count()

    def metrics(h: BaseHTTPRequestHandler) -> Answer | None:
        i = next(reads)
        return page(before[i]) if i < len(before) else failure(h)

    routes = {"GET /metrics": metrics,
              "GET /v1/models": (lambda h: models_answer()) if models_ok else (lambda h: answer(503, "overloaded")),
              "POST /v1/completions": probe or (lambda h: completion_answer())}
    return Loopback(routes)


def paths(srv: Loopback) -> list[str]:
    """The requests, without the restricted /metrics/ read this server does not serve (404: the check falls back)."""
    return [f"{s.method} {s.path}" for s in srv.seen if s.path != "/metrics/"]


@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("kind", list(FAILURES))
def test_a_failed_read_with_models_answering_is_a_warning_that_names_it(check, read, kind):
    before, probe = READS[read]
    with server(before, FAILURES[kind], probe, models_ok=True) as srv:
        r = check("-u", srv.url, *DEFAULT_PROOF)
        seen = paths(srv)
    assert r.code == WARNING and r.word == WORD[kind], (read, kind, r.out, seen)
    assert seen.count("GET /metrics") == len(before) + 1, seen
    if WORD[kind] == "no metrics":  # liveness was asked right after the read that found no page
        assert seen[seen.index("GET /metrics", len(before)) + 1:][:1] == ["GET /v1/models"], seen
        assert "/v1/models lists" in r.status, r.out


@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("kind", ["html 200", "404"])
def test_no_metrics_is_critical_only_when_models_was_asked_and_failed(check, read, kind):
    before, probe = READS[read]
    with server(before, FAILURES[kind], probe, models_ok=False) as srv:
        r = check("-u", srv.url, *TRIGGER_HAPPY)
        seen = paths(srv)
    assert "GET /v1/models" in seen, (read, kind, r.out, seen)
    assert (r.code, r.word) == (CRITICAL, "no metrics"), (read, kind, r.out)
    assert "/v1/models failed too" in r.status and "503" in r.status, r.out


@pytest.mark.parametrize("read", list(READS))
def test_with_the_default_proof_no_single_run_is_critical(check, read):
    """The same failures under the shipped defaults (2 readings over 120 s): one run proves nothing."""
    before, probe = READS[read]
    for kind in FAILURES:
        with server(before, FAILURES[kind], probe, models_ok=False) as srv:
            r = check("-u", srv.url, *DEFAULT_PROOF)
        assert r.code != CRITICAL, (read, kind, r.out)
