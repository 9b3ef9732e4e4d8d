"""observe() driven as a reviewer would: a scripted server (httpx's in-process transport: no socket) and a
scripted host, for the sequencing of a run without a reading. Every read or probe that gives no reading goes
through one door (observe._without_reading): judged on its evidence, looked at again when the judge asks and
the caller may wait, never a settled verdict carrying an action (issue 27)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from check_vllm.contract.defaults import OPTIONS, SETTINGS, Options
from check_vllm.contract.instants import Instant
from check_vllm.contract.kept import Memory
from check_vllm.contract.values import ServerProcess, Witness
from check_vllm.contract.vocab import CRITICAL, DOWN, IDLE, STOPPING, WARNING
from check_vllm.observe import observe
from check_vllm.restart.starting import own_look
from check_vllm.server import host
from check_vllm.server.fetch import Endpoint

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "0.31.0"
BUSY, IDLE_PAGE = (PAGES / "saturated.txt").read_bytes(), (PAGES / "idle.txt").read_bytes()
URL = "http://127.0.0.1:8000"
#: vLLM 0.33's answer to a request once its engine died (EngineDeadError.CLIENT_MESSAGE).
DEAD_033 = {"error": {"message": "The server had an error while processing your request.",
                      "type": "InternalServerError", "code": 500}}
Reply = Callable[[httpx.Request], httpx.Response]


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


class Server:
    """Answers each request with the next reply scripted for its path (the last one repeats); counts them."""

    def __init__(self, **script: list[Reply]) -> None:
        self.script = {k.replace("_", "/"): v for k, v in script.items()}
        self.asked: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rstrip("/") or "/"
        self.asked.append(path)
        replies = self.script.get(path.strip("/"), [refused])
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        return reply(request)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def answer(status: int, body: object = None, content: bytes = b"", kind: str = "text/html") -> Reply:
    """A reply streamed as a socket's would be (the check reads bodies raw, with its own bounds)."""
    if body is not None:
        content, kind = json.dumps(body).encode(), "application/json"
    return lambda request: httpx.Response(status, stream=httpx.ByteStream(content), headers={"content-type": kind})


def page(body: bytes) -> Reply:
    return answer(200, content=body, kind="text/plain; version=0.0.4")


@pytest.fixture
def looks(monkeypatch) -> Iterator[list[Witness]]:
    """The host's witness, scripted: each look takes the next (the last repeats)."""
    script: list[Witness] = [Witness()]

    def witness(url: str, pid_file: str | None = None, pid_command: str | None = None) -> Witness:
        return script.pop(0) if len(script) > 1 else script[0]

    monkeypatch.setattr(host, "witness", witness)
    yield script


def run(server: Server, memory: Memory | None = None, options: Options = OPTIONS, t: float = 1000.0):
    """One observation; the clock moves as the run sleeps."""
    slept: list[float] = []
    seen = observe(server.client(), Endpoint(URL), memory or Memory(), SETTINGS, options, deadline=float("inf"),
                   now=lambda: Instant(t + sum(slept)), sleep=slept.append)
    return seen.verdict, slept


def test_a_busy_first_reading_then_refused_with_no_process_takes_the_second_look(looks):
    """f2970e2: CRITICAL down with a stray REREAD and no second look. Now the in-run re-read goes through the
    same door as the first read: the look a second later decides."""
    server = Server(metrics=[page(BUSY), refused])
    verdict, slept = run(server)
    assert slept == [OPTIONS.reread_delay, OPTIONS.look_again]
    assert (verdict.word, verdict.code, verdict.action) == (DOWN, CRITICAL, None)
    assert server.asked == ["/metrics", "/metrics", "/metrics"]


def test_the_second_look_finds_the_next_process_starting(looks):
    looks[:] = [Witness(), Witness(ServerProcess(4242, 1, Instant(1003.5), "command line"))]  # after the reading
    verdict, slept = run(Server(metrics=[page(BUSY), refused]))
    assert slept == [OPTIONS.reread_delay, OPTIONS.look_again]
    assert (verdict.word, verdict.code, verdict.action) == ("starting", WARNING, None)


def test_a_caller_that_may_not_wait_never_sleeps_and_its_next_run_is_the_second_look(looks):
    """f2970e2: Options(reread=False), the Netdata collector's and the agent's, still slept a second."""
    no_wait = OPTIONS._replace(reread=False)
    up, _ = run(Server(metrics=[page(IDLE_PAGE)]), options=no_wait._replace(probe=False))
    first, slept = run(Server(metrics=[refused]), up.memory, no_wait, t=1005.0)
    assert slept == []
    assert (first.word, first.code, first.action) == (STOPPING, WARNING, None)
    second, slept = run(Server(metrics=[refused]), first.memory, no_wait, t=1010.0)
    assert slept == [] and (second.word, second.code, second.action) == (DOWN, CRITICAL, None)


def test_a_dead_engine_of_vllm_033_is_down_through_its_health(looks):
    """0.33 and 0.34 no longer name the dead engine in a 500; GET /health still answers 503 (empty)."""
    server = Server(metrics=[page(IDLE_PAGE)], v1_completions=[answer(500, DEAD_033)], health=[answer(503)])
    verdict, slept = run(server)
    assert (verdict.word, verdict.code) == (DOWN, CRITICAL)
    assert verdict.text.startswith("engine died (completion answered HTTP 500: The server had an error")
    assert verdict.text.endswith("; GET /health answered 503)")
    assert slept == [] and verdict.memory.engine_dead == Instant(1000.0)  # no wait: its own word is proof


def test_a_proxy_503_page_on_health_is_no_dead_engine(looks):
    server = Server(metrics=[page(IDLE_PAGE)], v1_completions=[answer(500, DEAD_033)],
                    health=[answer(503, content=b"<html>503 Service Unavailable</html>")])
    verdict, _ = run(server)
    assert verdict.word != DOWN and verdict.code != CRITICAL


def test_a_200_that_is_no_completion_is_an_answer_that_proves_nothing(looks):
    """vLLM 0.7-0.11 for a model without the Completions API; an auth gateway's sign-in page."""
    for reply in (answer(200, {"error": {"message": "The model does not support Completions API", "code": 400}}),
                  answer(200, content=b"<html>sign in</html>")):
        server = Server(metrics=[page(IDLE_PAGE)], v1_completions=[reply])
        verdict, _ = run(server)
        assert (verdict.word, verdict.code) == (IDLE, WARNING), verdict.summary
        assert "HTTP 200 but no completion" in verdict.text
        assert server.asked.count("/metrics") == 1  # no re-read: an answer needs none


def test_the_handler_look_keeps_an_engine_its_server_called_dead_down(looks):
    """f2970e2: the handler found the API server alive and served, and called it stopping for ever."""
    alive = Witness(ServerProcess(4242, 1, Instant(0.0), "command line"))
    looks[:] = [alive]
    server = Server(metrics=[page(IDLE_PAGE)], v1_completions=[answer(500, DEAD_033)], health=[answer(503)])
    dead, _ = run(server)
    assert (dead.word, dead.code) == (DOWN, CRITICAL)
    again = own_look(URL, dead.memory, SETTINGS, OPTIONS, None, now=lambda: Instant(1030.0))
    assert again is not None and (again.word, again.code) == (DOWN, CRITICAL)
    # a plain refusal with the same live process is a stop the check had not seen yet: held back
    refused_last = dead.memory._replace(engine_dead=None)
    held = own_look(URL, refused_last, SETTINGS, OPTIONS, None, now=lambda: Instant(1030.0))
    assert held is not None and held.word == STOPPING
