"""The soak's own look at the server, twice a second: its counters and gauges, how long /metrics took,
and every reading the check saved in its state file (the two readings behind each verdict's perfdata).

The server's counters are read from the restricted page (`/metrics/?name[]=...`, 1-2 ms of API-server
CPU), so the sampler itself costs the server little and sends no inference request.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.rig.vllm_server import sample_sum

NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
         "vllm:prompt_tokens_total", "http_requests_total", "process_start_time_seconds")
PROBE_HANDLER = "/v1/completions"  # the check's probe; the soak's traffic never uses it


@dataclass
class Point:
    at: float            # the middle of the request
    latency: float       # seconds /metrics took, or -1 when it did not answer
    start: float | None  # process_start_time_seconds: one server process per value
    running: float = 0.0
    waiting: float = 0.0
    generated: float = 0.0
    prompt: float = 0.0
    probes: float = 0.0  # http_requests_total{handler="/v1/completions"}: the check's inference requests


@dataclass
class Saved:
    """One reading the check saved (state file "reading"), with the one it was compared with ("previous")."""

    at: float
    previous_at: float | None
    generated: float | None
    previous_generated: float | None
    running: float
    waiting: float
    word: str


def _engines_sum(reading: dict, key: str) -> float | None:
    vals = [e.get(key) for e in (reading.get("engines") or {}).values()]
    return sum(vals) if vals and all(isinstance(v, (int, float)) for v in vals) else None


def saved_of(doc: dict) -> Saved | None:
    data = doc.get("data", doc) if isinstance(doc, dict) else {}
    cur, prev = data.get("reading") or {}, data.get("previous") or {}
    if not isinstance(cur.get("at"), (int, float)):
        return None
    return Saved(at=cur["at"], previous_at=prev.get("at"), generated=_engines_sum(cur, "generation_tokens"),
                 previous_generated=_engines_sum(prev, "generation_tokens") if prev else None,
                 running=_engines_sum(cur, "running") or 0.0, waiting=_engines_sum(cur, "waiting") or 0.0,
                 word=str((data.get("verdict") or {}).get("word", "")))


class Sampler:
    def __init__(self, url: str, state_dir: Path, every: float = 0.5) -> None:
        self.url, self.state_dir, self.every = url, state_dir, every
        self.points: list[Point] = []
        self.saved: list[Saved] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="soak-sampler")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _loop(self) -> None:
        query = "&".join(f"name[]={n}" for n in NAMES)
        with httpx.Client(timeout=httpx.Timeout(10.0, connect=2.0)) as c:
            while not self._stop.is_set():
                t = time.time()
                self.points.append(self._point(c, query, t))
                self._read_state()
                self._stop.wait(max(0.0, self.every - (time.time() - t)))

    def _point(self, c: httpx.Client, query: str, t: float) -> Point:
        try:
            r = c.get(f"{self.url}/metrics/?{query}")
        except httpx.HTTPError:
            return Point(at=t, latency=-1, start=None)
        t1 = time.time()
        if r.status_code != 200:
            return Point(at=(t + t1) / 2, latency=-1, start=None)
        text = r.text
        return Point(at=(t + t1) / 2, latency=t1 - t, start=sample_sum(text, "process_start_time_seconds"),
                     running=sample_sum(text, "vllm:num_requests_running") or 0.0,
                     waiting=sample_sum(text, "vllm:num_requests_waiting") or 0.0,
                     generated=sample_sum(text, "vllm:generation_tokens_total") or 0.0,
                     prompt=sample_sum(text, "vllm:prompt_tokens_total") or 0.0,
                     probes=sample_sum(text, "http_requests_total", {"handler": PROBE_HANDLER}) or 0.0)

    def _read_state(self) -> None:
        for f in self.state_dir.glob("vllm-*.json"):
            if f.name.endswith(".restart-history.json"):
                continue
            try:
                s = saved_of(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue
            if s is not None and (not self.saved or self.saved[-1].at != s.at):
                self.saved.append(s)

    # -- questions asked afterwards
    def served(self, t0: float, t1: float) -> list[Point]:
        return [p for p in list(self.points) if t0 <= p.at < t1 and p.latency >= 0]

    def generated_at(self, t: float, start: float | None) -> float | None:
        """The server's generation counter at t, interpolated between the two samples around it (same process)."""
        pts = [p for p in self.points if p.latency >= 0 and p.start == start]
        before = [p for p in pts if p.at <= t]
        after = [p for p in pts if p.at >= t]
        if not before or not after:
            return None
        a, b = before[-1], after[0]
        if b.at - a.at > 3 * self.every + 1:
            return None  # a hole (the sampler waited for the server): no honest interpolation
        if b.at == a.at:
            return a.generated
        return a.generated + (b.generated - a.generated) * (t - a.at) / (b.at - a.at)
