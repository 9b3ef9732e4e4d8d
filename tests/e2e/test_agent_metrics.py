"""The agent's verdicts as Prometheus metrics (issue 55): the real `check_vllm_agent` against the simulator on
loopback, scraped over HTTP on its probe listener's GET /metrics and on its own --metrics-listen, the pages parsed
with prometheus_client's parser; a peer outside --allow closed unanswered; the API key and the URL's password in no
page and no log line."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.contract import vocab
from tests.rig.ports import free_port
from vllm_simulator import Simulator

KEY = "sk-agent-metrics-0123"
PASSWORD = "pw-s3cret-4567"


class Agent(NamedTuple):
    probes: str
    metrics: str
    metrics_port: int
    log: Callable[[], str]


@contextlib.contextmanager
def running_agent(server: str, *extra: str) -> Iterator[Agent]:
    """The real agent judging `server` every 0.5 s, both HTTP listeners on, loopback allowed; stopped cleanly."""
    port, probes, metrics = free_port(), free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "check_vllm.haproxy.cli", "-u", server, "--listen",
                             f"127.0.0.1:{port}", "--probe-listen", f"127.0.0.1:{probes}", "--metrics-listen",
                             f"127.0.0.1:{metrics}", "--allow", "127.0.0.1", "--interval", "0.5",
                             "--stuck-seconds", "2", "--stuck-readings", "2", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "VLLM_API_KEY": KEY})
    err: list[str] = []
    agent = Agent(f"http://127.0.0.1:{probes}", f"http://127.0.0.1:{metrics}", metrics, lambda: "".join(err))
    try:
        for _ in range(100):
            try:
                httpx.get(f"{agent.metrics}/metrics", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield agent
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
        err.append(proc.stderr.read() if proc.stderr else "")
        assert "Traceback" not in err[-1], err[-1]


def scrape(url: str) -> tuple[dict[str, list[tuple[dict[str, str], float]]], str]:
    """Sample name -> [(labels, value)] of one GET /metrics, and its raw text."""
    got = httpx.get(f"{url}/metrics", timeout=5)
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain; version="), got
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(got.text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out, got.text


def word_of(page: dict) -> str | None:
    on = [labels["word"] for labels, value in page.get("check_vllm_verdict", []) if value == 1.0]
    return on[0] if on else None


def until_word(url: str, word: str, *names: str, timeout: float = 30.0) -> tuple[dict, str]:
    """The first page whose verdict is `word`, with the series `names` (a first reading has no rate yet)."""
    deadline = time.monotonic() + timeout
    while True:
        page, text = scrape(url)
        if (word_of(page) == word and all(n in page for n in names)) or time.monotonic() > deadline:
            return page, text
        time.sleep(0.3)


def value(page: dict, name: str) -> float:
    (_, v), = page[name]
    return v


@pytest.fixture
def busy() -> Iterator[Simulator]:
    sim = Simulator(scenario="busy").start()
    try:
        yield sim
    finally:
        sim.stop()


def test_the_agent_serves_its_verdicts_to_prometheus_on_both_listeners(busy: Simulator):
    started = time.time()
    with running_agent(busy.url.replace("http://", f"http://admin:{PASSWORD}@")) as agent:
        page, text = until_word(agent.metrics, vocab.BUSY, "check_vllm_tokens_per_second")
        assert word_of(page) == vocab.BUSY and value(page, "check_vllm_tokens_per_second") > 0, text
        labels = {k: v for k, v in page["check_vllm_verdict"][0][0].items() if k != "word"}
        assert labels == {"server": busy.url, "engine": "vllm", "model": "tiny-llama"}, labels
        assert len(page["check_vllm_verdict"]) == len(vocab.WORDS)
        assert value(page, "check_vllm_state") == vocab.OK and value(page, "check_vllm_restartable") == 0.0
        assert value(page, "check_vllm_requests_running") > 0, text
        assert value(page, "check_vllm_agent_up") == 1.0 and value(page, "check_vllm_agent_judgements_total") >= 1
        judged = value(page, "check_vllm_last_judgement_timestamp_seconds")
        assert started <= judged <= time.time()  # judged by this agent, on the wall clock
        assert "check_vllm_idle_completion_seconds" not in page  # busy: never sent one, so none is shown
        probe_page, _ = until_word(agent.probes, vocab.BUSY)  # the probe listener's /metrics: the same verdict
        assert word_of(probe_page) == vocab.BUSY
        assert httpx.get(f"{agent.probes}/livez", timeout=5).status_code == 200  # its probes still answer
        assert httpx.get(f"{agent.metrics}/livez", timeout=5).status_code == 404  # --metrics-listen: /metrics only

        busy.set_scenario("stuck")
        page, text = until_word(agent.metrics, vocab.STUCK, "check_vllm_stalled_seconds")
        assert word_of(page) == vocab.STUCK, text
        assert value(page, "check_vllm_state") == vocab.CRITICAL and value(page, "check_vllm_restartable") == 1.0
        assert value(page, "check_vllm_stalled_seconds") >= 2.0, text
        assert busy.inference_requests() == []  # scrapes read the latest judgement, never the server
        for where in (agent.metrics, agent.probes):
            body = httpx.get(f"{where}/metrics", timeout=5).text
            assert KEY not in body and PASSWORD not in body and "admin" not in body
    assert KEY not in agent.log() and PASSWORD not in agent.log(), agent.log()


def test_a_peer_outside_allow_is_closed_unanswered(busy: Simulator):
    with running_agent(busy.url) as agent:
        until_word(agent.metrics, vocab.BUSY)
        with socket.create_connection(("127.0.0.1", agent.metrics_port), timeout=5,
                                      source_address=("127.0.0.2", 0)) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            got = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := s.recv(4096):
                    got += chunk
        assert got == b"", got
        assert word_of(scrape(agent.metrics)[0]) == vocab.BUSY  # the allowed peer still is answered


def test_a_hostile_model_name_is_one_short_label():
    model = 'team "a"\\b/' + "m" * 200 + "\u202e"
    sim = Simulator(scenario="busy", model=model).start()
    try:
        with running_agent(sim.url) as agent:
            page, text = until_word(agent.metrics, vocab.BUSY)
            got = {labels["model"] for labels, _ in page["check_vllm_verdict"]}
            assert len(got) == 1, got
            label = got.pop()
            assert label.startswith('team "a"\\b/mmm') and label.endswith("...") and len(label) <= 64, label
            assert "\u202e" not in text
    finally:
        sim.stop()
