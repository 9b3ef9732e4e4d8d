"""One job's tick (observe, judge, chart), and the threads that run many jobs in one process.

The tick is the unit the tests drive: it takes its clocks and HTTP client from the caller and returns
the plugins.d text it would send. Each job runs its ticks in its own thread, aligned to its own
update_every on the monotonic clock, and hands whole blocks to one locked writer: a slow or dead
server delays only its own charts, never the other jobs'.

Probing is rare by construction: the decision engine asks for a probe only when no work is present,
and the job sends one at most once per `idle_completion_every` (never when `idle_completion = no` or in proxy mode).
Every other tick costs one GET /metrics: of the restricted page (check_vllm.server.api), or of the whole page
for a server that does not serve that one. Which page a server serves lives in the job's memory with the
rest of it (check_vllm.contract.kept.Memory.whole_page), so the collector learns it once, like the check does.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

import httpx

from check_vllm.cli import option_table
from check_vllm.cli.connection import Rotating, as_key
from check_vllm.cli.option_table import NETDATA
from check_vllm.contract.defaults import SETTINGS
from check_vllm.contract.kept import Memory
from check_vllm.contract.safe_text import one_line
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.long_running import Observer, given_clock, next_slot
from check_vllm.machine import clock

from . import charts
from .config import Job


def log(message: str) -> None:
    """One line to stderr, which Netdata appends to its error.log."""
    try:
        sys.stderr.write(f"vllm.plugin: {one_line(message, pipe=False)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class JobCollector:
    """The in-memory state of one job and its tick."""

    def __init__(
        self, job: Job, *, client: httpx.Client | None = None,
        wall: Callable[[], float] | None = None, mono: Callable[[], float] | None = None,
        say: Callable[[str], None] = log,
    ) -> None:
        """`wall` and `mono` are a test's clocks; without them the host's (check_vllm.long_running)."""
        self.job = job
        self.rotating = Rotating(job, NETDATA, as_key, job.endpoint)
        self.endpoint = self.rotating.endpoint
        self.client = client or self.endpoint.client()
        self.mono, self.say = mono or time.monotonic, say
        # A comparison needs a gap; at update_every 1 it must not be longer than the tick itself.
        self.settings = option_table.settings_from(job, NETDATA,
                                                   min_gap=min(SETTINGS.min_gap, 0.5 * job.update_every))
        # The next tick reads again anyway: never sleep for a second reading inside one.
        self.options = option_table.options_from(job, NETDATA, probe=job.completes_when_idle, reread=False)
        now = clock.now if wall is None and mono is None else given_clock(wall or time.time, self.mono)
        self.observer = Observer(self.client, self.endpoint, self.settings, self.options, job.idle_completion_every,
                                 now=now, mono=self.mono, fresh=None if client else self.rotating.fresh, say=say)
        self.engines: tuple[str, ...] = ()  # engines that have their own dimensions (bounded)
        self.model: str | None = None
        self.defined = False
        self.last_sent: dict[str, float] = {}
        self.last_word: str | None = None
        self.last_code = 0
        self.told_bound = False

    # ------------------------------------------------------------------ observation

    def observe(self) -> tuple[Verdict, Reading | None, float | None]:
        """One GET /metrics (plus, rarely, the idle probe): the verdict, the reading, the probe's seconds."""
        seen = self.observer.observe()
        return seen.verdict, seen.reading, seen.verdict.probe_seconds

    @property
    def memory(self) -> Memory:
        return self.observer.memory

    @property
    def probes_sent(self) -> int:
        return self.observer.probes

    # ------------------------------------------------------------------ charting

    def _learn(self, reading: Reading | None) -> bool:
        """Note new engines (up to the bound) and the model; True when the charts must be defined again."""
        if reading is None:
            return False
        changed = False
        if len(reading.engines) > 1:
            new = sorted(e for e in reading.engines if e not in self.engines)
            room = max(charts.MAX_ENGINES - len(self.engines), 0)
            if new and room:
                self.engines += tuple(new[:room])
                changed = True
            if len(new) > room and not self.told_bound:
                self.told_bound = True
                self.say(f"job {self.job.name}: more than {charts.MAX_ENGINES} engines; "
                         "the others count in the totals only")
        if reading.model and reading.model != self.model:
            self.model = reading.model
            changed = True
        return changed

    def tick(self) -> str:
        """Observe once and return the protocol text for it (chart definitions first when needed)."""
        verdict, reading, probe_seconds = self.observe()
        if verdict.word != self.last_word:
            if verdict.code or self.last_code:  # problems and recoveries; busy <-> idle is no news
                self.say(f"job {self.job.name}: {verdict.summary}")
            self.last_word, self.last_code = verdict.word, verdict.code
        out = ""
        if self._learn(reading) or not self.defined:
            out += charts.define(self.job, self.job.update_every, self.engines, self.model)
            self.defined = True
        data = charts.collect(self.job, verdict, reading, self.engines, probe_seconds)
        now = self.mono()
        since = {c: int(round((now - self.last_sent[c]) * 1e6)) for c in data if c in self.last_sent}
        self.last_sent.update({c: now for c in data})
        return out + charts.update(self.job, data, since)


class Output:
    """The one stdout writer: whole blocks under a lock, flushed at once."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.stream.write(text)
            self.stream.flush()


def run_job(collector: JobCollector, out: Output, stop: threading.Event) -> None:
    """Tick until `stop`; a broken pipe (Netdata went away) stops the whole plugin."""
    every = collector.job.update_every
    last_error = ""
    while not stop.is_set():
        text = ""
        try:
            text = collector.tick()
        except Exception as err:  # a bug must cost a tick, not the plugin
            msg = f"job {collector.job.name}: tick failed: {err.__class__.__name__}: {err}"
            if msg != last_error:
                log(msg)
                last_error = msg
        if text:
            try:
                out.write(text)
            except (BrokenPipeError, ValueError, OSError):
                stop.set()
                return
        now = time.monotonic()
        stop.wait(max(next_slot(now, every) - now, 0.0))


def start(jobs: list[Job], out: Output, stop: threading.Event) -> list[threading.Thread]:
    threads = []
    for job in jobs:
        t = threading.Thread(target=run_job, args=(JobCollector(job), out, stop), name=f"vllm-{job.name}",
                             daemon=True)
        t.start()
        threads.append(t)
    return threads
