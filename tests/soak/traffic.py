"""The soak's seeded traffic: bursts, idle gaps, long prompts, streams, clients that give up, rejects.

Everything goes to /v1/chat/completions, never /v1/completions: that endpoint is the check's probe
(check_vllm/server/api.py), so the server's own http_requests_total{handler="/v1/completions"} counts
the check's inference requests and nothing else. Every request is logged (sent, first token, end,
outcome, tokens received) so the server's counters can be held against the load's own count.

The plan is drawn from random.Random(seed) one burst at a time: the same seed gives the same sequence of
bursts, prompts and gaps (their wall-clock placement against the faults moves with the machine's speed).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import asdict, dataclass, field

import httpx

from tests.rig.vllm_server import SERVED_MODEL_NAME

from .settings import MAX_MODEL_LEN, MAX_NUM_SEQS

#: Common English words: each is one or two tokens of the tiny byte-level BPE.
WORDS = ("the of and to in is it you that he was for on are with as his they be at one have this from or had by "
         "word but what some we can out other were all there when up use your how said an each she which do "
         "their time if will way about many then them write would like so these her long make thing see him two "
         "has look more day could go come did number sound no most people my over know water than call first "
         "who may down side been now find").split()
KINDS = ("plain", "stream", "abandon", "toolong")


@dataclass
class Req:
    id: int
    kind: str                 # plain | stream | abandon | toolong | sustain
    words: int
    max_tokens: int
    abandon_after: int = 0    # chunks read before the client closes (abandon)
    sent: float = 0.0
    first: float | None = None
    end: float | None = None
    status: int | None = None
    outcome: str = "?"        # ok | abandoned | rejected | refused | failed
    tokens: int = 0           # completion tokens the client saw (usage when given, else chunks)
    usage: int | None = None  # the server's usage.completion_tokens
    error: str = ""

    def in_flight(self, t: float) -> bool:
        return self.sent <= t and (self.end is None or t < self.end)


@dataclass
class Plan:
    """The traffic's shape: how often a burst, how big, what its requests ask for."""

    seed: int
    tokens_per_word: float = 1.5
    gap: tuple[float, float] = (4.0, 15.0)
    burst_share: float = 0.45
    burst_max: int = 4 * MAX_NUM_SEQS
    shares: dict = field(default_factory=lambda: {"plain": 0.45, "stream": 0.3, "abandon": 0.15, "toolong": 0.1})
    max_tokens: tuple[int, int] = (8, 400)

    def request(self, rng: random.Random, i: int) -> Req:
        kind = rng.choices(list(self.shares), weights=list(self.shares.values()))[0]
        if kind == "toolong":  # well past the context: the server rejects it (HTTP 400)
            return Req(i, kind, int(MAX_MODEL_LEN * rng.uniform(1.3, 2.0) / self.tokens_per_word), 16)
        max_tokens = rng.randint(*self.max_tokens)
        room = (MAX_MODEL_LEN - max_tokens) * 0.85 / self.tokens_per_word  # near the limit, never past it
        words = int(rng.choice((rng.uniform(2, 20), rng.uniform(20, room), rng.uniform(0.8 * room, room))))
        return Req(i, kind, max(2, words), max_tokens,
                   abandon_after=rng.randint(1, max(1, max_tokens // 2)) if kind == "abandon" else 0)

    def steps(self):
        """An endless seeded sequence of ("gap", seconds) and ("burst", [Req, ...])."""
        rng = random.Random(self.seed)
        i = 0
        while True:
            if rng.random() < self.burst_share:
                n = rng.randint(1, self.burst_max)
                reqs = [self.request(rng, i + k) for k in range(n)]
                i += n
                yield "burst", reqs
            else:
                yield "gap", round(rng.uniform(*self.gap), 1)

    def preview(self, n: int = 12) -> str:
        out = []
        for _, (kind, what) in zip(range(n), self.steps(), strict=False):
            if kind == "gap":
                out.append(f"gap {what:g}s")
            else:
                out.append(f"burst {len(what)}x[" + ",".join(f"{r.kind[0]}{r.words}w/{r.max_tokens}t" for r in what)
                           + "]")
        return "; ".join(out) + "; ..."


def prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


class Traffic:
    """Runs the plan on its own thread until stop(); sustain(n) adds n clients of long streams (a fault's
    load), which go on through a restart (refused while nothing listens, then again)."""

    def __init__(self, url: str, plan: Plan, read_timeout: float = 120.0) -> None:
        self.url, self.plan = url, plan
        self.timeout = httpx.Timeout(read_timeout, connect=5.0)
        self.log: list[Req] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sustain_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ids = 10**6
        self.bursts = self.gaps = 0

    # -- the plan
    def start(self) -> None:
        t = threading.Thread(target=self._loop, daemon=True, name="soak-traffic")
        t.start()
        self._threads.append(t)

    def _loop(self) -> None:
        rng = random.Random(self.plan.seed + 1)  # the prompts' words
        for kind, what in self.plan.steps():
            if self._stop.is_set():
                return
            if kind == "gap":
                self.gaps += 1
                self._stop.wait(what)
                continue
            self.bursts += 1
            ts = [threading.Thread(target=self._one, args=(r, prompt(rng, r.words)), daemon=True) for r in what]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

    def stop(self) -> None:
        self._stop.set()
        self._sustain_stop.set()
        for t in self._threads:
            t.join(timeout=15)

    # -- a fault's load
    def sustain(self, n: int, max_tokens: int = 1500) -> None:
        self._sustain_stop.clear()
        for k in range(n):
            t = threading.Thread(target=self._sustain, args=(max_tokens,), daemon=True, name=f"soak-sustain-{k}")
            t.start()
            self._threads.append(t)

    def release(self) -> None:
        self._sustain_stop.set()

    def _sustain(self, max_tokens: int) -> None:
        rng = random.Random()
        while not (self._sustain_stop.is_set() or self._stop.is_set()):
            with self._lock:
                self._ids += 1
                r = Req(self._ids, "sustain", 40, max_tokens)
            self._one(r, prompt(rng, 40))
            if r.outcome in ("refused", "failed"):
                self._sustain_stop.wait(2.0)

    # -- one request
    def _one(self, r: Req, text: str) -> None:
        body = {"model": SERVED_MODEL_NAME, "messages": [{"role": "user", "content": text}],
                "max_tokens": r.max_tokens, "temperature": 0.0, "ignore_eos": True}
        stream = r.kind in ("stream", "abandon", "sustain")
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        with self._lock:
            self.log.append(r)
        r.sent = time.time()
        try:
            with httpx.Client(base_url=self.url, timeout=self.timeout) as c:
                if stream:
                    self._stream(c, r, body)
                else:
                    resp = c.post("/v1/chat/completions", json=body)
                    r.status = resp.status_code
                    if resp.status_code == 200:
                        r.usage = resp.json().get("usage", {}).get("completion_tokens")
                        r.tokens, r.outcome, r.first = r.usage or 0, "ok", time.time()
                    else:
                        r.outcome = "rejected" if resp.status_code == 400 else "failed"
                        r.error = resp.text[:160]
        except httpx.ConnectError as exc:
            r.outcome, r.error = "refused", str(exc)[:160]
        except Exception as exc:  # noqa: BLE001 - recorded: a request that died in a fault is a measurement
            r.outcome, r.error = "failed", f"{type(exc).__name__}: {exc}"[:160]
        finally:
            r.end = time.time()

    def _stream(self, c: httpx.Client, r: Req, body: dict) -> None:
        with c.stream("POST", "/v1/chat/completions", json=body) as resp:
            r.status = resp.status_code
            if resp.status_code != 200:
                r.outcome = "rejected" if resp.status_code == 400 else "failed"
                r.error = resp.read().decode(errors="replace")[:160]
                return
            done = False
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("usage") and not chunk.get("choices"):
                    r.usage = chunk["usage"].get("completion_tokens")
                    continue
                if chunk.get("choices"):
                    r.first = r.first or time.time()
                    # the role chunk and a token that decodes to no text carry no content: a lower bound
                    r.tokens += 1 if (chunk["choices"][0].get("delta") or {}).get("content") else 0
                if r.kind == "abandon" and r.tokens >= r.abandon_after:
                    r.outcome = "abandoned"
                    return  # closing the stream: the client gives up mid-answer
            r.outcome = "ok" if done else "failed"
            if not done:
                r.error = "stream ended without [DONE]"

    # -- what it did
    def requests(self, t0: float = 0.0, t1: float = float("inf")) -> list[Req]:
        with self._lock:
            return [r for r in self.log if t0 <= r.sent < t1]

    def in_flight(self, t: float) -> int:
        """Requests that reached the engine and were still running at t (rejected ones never run)."""
        with self._lock:
            return sum(1 for r in self.log if r.outcome not in ("rejected", "refused") and r.in_flight(t))

    def dump(self) -> list[dict]:
        with self._lock:
            return [asdict(r) for r in self.log]
