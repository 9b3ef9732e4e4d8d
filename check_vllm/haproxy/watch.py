"""The judging loop: one observation every few seconds, the latest answer kept for every connection.

A daemon, not a run per connection: HAProxy connects every agent-inter, once per balancer and per backend
section that names the server, so a judge per connection would put a /metrics read (and its CPU in the
vLLM API server) on the backend for each of them, and two balancers would read the counters twice as often
as the stall rule was tuned for. Here the cadence is the agent's own and a connection costs no I/O at all.

The memory lives in this process, as the Netdata collector's does (check_vllm.netdata.collector): its
monotonic clock measures the stall across readings; a restarted agent starts with a new baseline, so its
first verdict on a stalled server is stalling (drain), never stuck.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import httpx

from check_vllm.contract.defaults import Options, Settings
from check_vllm.contract.verdict import Verdict
from check_vllm.long_running import Observer, given_clock, next_slot
from check_vllm.machine import clock
from check_vllm.probes.answers import Seen
from check_vllm.server.fetch import Endpoint

from .exposition import IdleCompletion, Named, Scrape, named
from .reply import NO_VERDICT, Reply, reply_for

#: How long a connection in the agent's first moments waits for its first verdict.
FIRST_WAIT = 0.5


class Latest(NamedTuple):
    """What a connection is told: the reply, the verdict it rests on, when (monotonic) it was judged."""

    reply: Reply
    summary: str
    at: float
    #: What the same judgement tells an orchestrator's probe (check_vllm.probes.answers).
    seen: Seen = Seen(fault="no verdict yet: the agent is starting")
    #: The verdict itself and when it was judged on the wall clock (GET /metrics); None before the first.
    verdict: Verdict | None = None
    wall: float | None = None

    def line(self) -> str:
        return self.reply.line(self.summary)


class Watch:
    """One backend's memory, judged every `every` seconds; `answer()` is what a connection gets now."""

    def __init__(self, endpoint: Endpoint, settings: Settings, options: Options, every: float, probe_every: float,
                 *, say: Callable[[str], None], client: httpx.Client | None = None,
                 fresh: Callable[[], tuple[Endpoint, str]] | None = None,
                 mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] | None = None) -> None:
        """`wall` (with `mono`) is a test's clock; without it the host's (check_vllm.long_running)."""
        self.endpoint, self.settings, self.options = endpoint, settings, options
        self.every, self.probe_every, self.say = every, probe_every, say
        self.client = client or endpoint.client()
        self.mono, self.wall = mono, wall or time.time
        now = clock.now if wall is None else given_clock(wall, mono)
        self.observer = Observer(self.client, endpoint, settings, options, probe_every, now=now, mono=mono,
                                 fresh=fresh if client is None else None, say=say)  # a given client stays
        self.lock = threading.Lock()
        self._answer = Latest(NO_VERDICT, "no verdict yet: the agent is starting", mono())
        #: Set once the first judgement is done (or failed): the first connections wait a moment for it.
        self.first = threading.Event()
        #: The server has been read since the agent started (a startup probe's question).
        self.served = False
        #: An answer older than this is no verdict: the loop is wedged or dead (each read is bounded by
        #: its timeout, the probe by its own).
        self.stale_after = 3 * every + 2 * (options.metrics_timeout or 5.0) + options.probe_timeout
        #: What GET /metrics adds to the latest verdict (check_vllm.haproxy.exposition).
        self.named = Named()
        self.idle: IdleCompletion | None = None
        self.judgements = self.errors = 0

    @property
    def probes(self) -> int:
        return self.observer.probes

    def judge(self) -> Verdict:
        """One observation (a GET /metrics; the probe only when idle and due) and the answer it gives."""
        seen = self.observer.observe()
        verdict = seen.verdict
        reply = reply_for(verdict.word, verdict.code)
        with self.lock:
            before = self._answer.reply
            self.served = self.served or seen.reading is not None
            told = Seen(verdict.word, verdict.code, verdict.summary, reading=seen.reading is not None,
                        served_before=self.served, loaded=verdict.loaded)
            wall = self.wall()
            self._answer = Latest(reply, verdict.summary, self.mono(), told, verdict, wall)
            self.named, self.judgements = named(self.named, verdict, seen.reading), self.judgements + 1
            if verdict.probe_seconds is not None:
                self.idle = IdleCompletion(verdict.probe_seconds, wall)
        if reply != before:
            self.say(f"{before.name} -> {reply.name}: {verdict.summary}")
        return verdict

    def answer(self) -> Latest:
        """The latest answer, or NO_VERDICT when the loop has not judged for stale_after seconds. A connection
        in the agent's first moments waits up to FIRST_WAIT for the first verdict (no drain at every start), never
        longer: the listeners serve from the first second even when the first reading hangs."""
        self.first.wait(FIRST_WAIT)
        with self.lock:
            got = self._answer
        age = self.mono() - got.at
        if age > self.stale_after:
            why = f"no verdict for {age:.0f} s (last: {got.summary})"
            return Latest(NO_VERDICT, why, got.at, Seen(fault=why, served_before=self.served))
        return got

    def scrape(self) -> Scrape:
        """What GET /metrics shows now: the latest verdict unless stale (as answer() says), the loop's own health."""
        with self.lock:
            got, labels, idle, judgements, errors = self._answer, self.named, self.idle, self.judgements, self.errors
        age = self.mono() - got.at if got.verdict is not None else None
        current = got.verdict if age is not None and age <= self.stale_after else None
        return Scrape(self.endpoint.url, current, labels, idle, got.wall, age, self.stale_after, judgements, errors)

    def judge_safely(self, last_error: str = "") -> str:
        """judge(), where a bug costs one reading (the answer goes stale), said once; the error's text."""
        try:
            self.judge()
            return ""
        except Exception as err:  # noqa: BLE001 - the loop must outlive a bug
            msg = f"reading failed: {err.__class__.__name__}: {err}"
            if msg != last_error:
                self.say(msg)
            with self.lock:
                self.errors += 1
            return msg
        finally:
            self.first.set()

    def run(self, stop: threading.Event) -> None:
        """Judge now, then on the monotonic clock's multiples of `every`, until `stop`."""
        last_error = ""
        while not stop.is_set():
            last_error = self.judge_safely(last_error)
            now = time.monotonic()
            stop.wait(max(next_slot(now, self.every) - now, 0.0))
