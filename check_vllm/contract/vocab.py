"""The vocabulary every part of check_vllm speaks: exit codes, the verdict table, perfdata, actions (the defaults: contract.defaults).

One owner for each fact. The check, the restart handler, the Netdata collector and the demo import
these names; none of them restates a number or a word. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

# --------------------------------------------------------------------------- exit codes (plugin API)

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
#: The plugin API's name for each exit code, in code order.
CODE_NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")

# --------------------------------------------------------------------------- verdict words

BUSY = "busy"
STALLING = "stalling"
STUCK = "stuck"
IDLE = "idle"
RESTARTED = "restarted"
SLEEPING = "sleeping"
DOWN = "down"
UNRESPONSIVE = "unresponsive"
NO_METRICS = "no metrics"
PROXY = "proxy"
STARTING = "starting"
#: The server's process served and still lives, but refuses connections: vLLM closes its listener first
#: when it stops (an operator's restart, a deploy) and may take a while to exit.
STOPPING = "stopping"
#: The monitoring side cannot reach the server (DNS, TLS): a restart cannot fix it, so it is UNKNOWN.
UNREACHABLE = "unreachable"
#: The peer at the URL does not speak HTTP (an https port behind an http:// URL, a header past the client's
#: limit): an instant answer, not a busy event loop, so not restartable; UNKNOWN like unreachable.
PROTOCOL = "protocol"
#: /metrics comes from more than one server process in turn: the URL is a load balancer.
BALANCER = "balancer"
#: Quiet on purpose: the server says its engine is paused (POST /pause, an RL trainer's weight update; a
#: checkpoint) or weights are moving into it: no progress proves nothing. Never restarted.
PAUSED = "paused"
#: Quiet while it waits: all its waiting work is deferred (a KV transfer from a prefill instance, a LoRA budget, a
#: grammar compiling) and the idle probe answers, or the stall is not yet proven.
KV_TRANSFER = "kv transfer"

# --------------------------------------------------------------------------- rotation: may it take new work

#: Serves: in rotation.
READY = "ready"
#: Unproven trouble: no new work, the work in flight goes on.
DRAIN = "drain"
#: Proof of a stall: out, as a failed health check.
FAIL = "fail"
#: Proof that nothing serves: out (the rotation entry; DOWN is the verdict word).
MARK_DOWN = "down"
#: The monitoring side cannot judge: leave the decision to whoever else looks.
ABSTAIN = "abstain"


def _r(entries: dict[int, str]) -> Mapping[int, str]:
    return MappingProxyType(entries)


class Word(NamedTuple):
    """One verdict word of the operator contract: each state it can carry with what it does to the server's
    rotation (check_vllm.contract.rotation), whether check_vllm_restart may restart on it (when CRITICAL), and
    its meaning for --help and the README."""

    word: str
    rotation: Mapping[int, str]
    restartable: bool
    meaning: str

    @property
    def states(self) -> tuple[int, ...]:
        return tuple(self.rotation)


#: The operator contract, one row per word (the order of --help and of the Netdata dimensions). The state of a word is this
#: table's, never a file's: a saved verdict whose state the word cannot carry is no verdict.
VERDICTS = (
    Word(BUSY, _r({OK: READY}), False,
         "work present and progress since the previous reading"),
    Word(STALLING, _r({WARNING: DRAIN}), False,
         "work present, no progress yet, not proven stuck"),
    Word(STUCK, _r({CRITICAL: FAIL}), True,
         "no progress over --stuck-readings comparisons spanning --stuck-seconds, "
         "or an idle engine left a 1-token probe unanswered without progress"),
    Word(IDLE, _r({OK: READY, WARNING: READY}), False,
         "no work; the 1-token probe answered (the only run that sends inference); "
         "WARNING when the probe was rejected or cut short by -t"),
    Word(RESTARTED, _r({OK: READY}), False,
         "new server process: new baseline, counters of two processes never compared"),
    Word(SLEEPING, _r({OK: DRAIN}), False,
         "vllm:engine_sleep_state says asleep"),
    Word(DOWN, _r({CRITICAL: MARK_DOWN}), True,
         "connection refused: nothing listens at the URL; or not serving --start-grace "
         "after its process started; or refusing --stop-grace after it served; or a crash "
         "loop (processes starting in turn, none serving); or its API server says the "
         "engine died (an error naming it, or GET /health 503)"),
    Word(UNRESPONSIVE, _r({WARNING: DRAIN, CRITICAL: FAIL}), True,
         "/metrics timed out or answered 5xx; CRITICAL once it lasts as "
         "long as stuck needs"),
    Word(NO_METRICS, _r({WARNING: ABSTAIN, CRITICAL: DRAIN}), False,
         "no usable /metrics; /v1/models answers, even 4xx (CRITICAL if "
         "refused or silent)"),
    Word(PROXY, _r({OK: ABSTAIN, WARNING: ABSTAIN, CRITICAL: ABSTAIN}), False,
         "--proxy: /v1/models only; WARNING when it answers 4xx or loops "
         "redirects (the handler restarts on it only with --proxy)"),
    Word(STARTING, _r({WARNING: DRAIN}), False,
         "not serving yet, and its process younger than --start-grace "
         "(whoever started it)"),
    Word(STOPPING, _r({WARNING: DRAIN}), False,
         "connection refused, but its process served and still lives, or has "
         "just exited (for one more look) with no other started yet: a graceful "
         "stop (a restart, a deploy); down after --stop-grace; or nothing listens "
         "and no process right after it served: looking again; or a vLLM rank retired "
         "by elastic scaling, awaiting shutdown (503, its own words)"),
    Word(UNREACHABLE, _r({UNKNOWN: ABSTAIN}), False,
         "DNS lookup or TLS handshake failed: the monitoring side cannot reach it "
         "(resolver, CA bundle, certificate, scheme); never restarted"),
    Word(BALANCER, _r({WARNING: ABSTAIN}), False,
         "/metrics comes from more than one server process in turn: the URL is a "
         "load balancer (use --proxy)"),
    Word(PAUSED, _r({OK: DRAIN, WARNING: DRAIN}), False,
         "no progress, and the server says its engine is paused on purpose (GET "
         "/is_paused, vLLM >= 0.32 in dev mode; the probe answered 503 'Generation "
         "is paused', vLLM >= 0.33; a checkpoint, GET /checkpoint/status; SGLang's GET "
         "/ready 503 while /ping answers; vLLM 0.34 scaling its experts: 503 'The model is "
         "currently scaling') or weights are moving into it "
         "(vllm:rl_weight_update_operations_in_flight, its operations finishing within "
         "--pause-grace: none finishing past it is a stall); WARNING past --pause-grace, "
         "or at once for a failed checkpoint"),
    Word(KV_TRANSFER, _r({WARNING: DRAIN}), False,
         "no progress, every waiting request deferred "
         "(vllm:num_requests_waiting_by_reason: a KV transfer, a LoRA budget, a "
         "grammar compiling) and nothing running: the probe answered, or the stall "
         "is not yet proven (never beyond that unprobed)"),
    Word(PROTOCOL, _r({UNKNOWN: ABSTAIN}), False,
         "the peer does not speak HTTP (an https port behind an http:// URL, a header "
         "past the client's limit): an instant answer, not a busy server; never "
         "restarted"),
)
BY_WORD = {w.word: w for w in VERDICTS}
#: Every word a verdict can start with; Netdata charts one dimension per word.
WORDS = tuple(w.word for w in VERDICTS)
#: Engine words, worst first: the worst engine names the whole server.
ENGINE_RANK = (STUCK, STALLING, BUSY, IDLE, SLEEPING)
#: Engine words that judge work present (a stall streak belongs to these).
WORKING = (BUSY, STALLING, STUCK)
#: Verdicts a restart can cure, when CRITICAL. "stalling", "starting" and "stopping" are not proof.
RESTARTABLE = tuple(w.word for w in VERDICTS if w.restartable)


def state_of(word: str, saved: object) -> int | None:
    """The state a saved verdict may claim for its word: the contract's when the word has one, the saved
    one only where the word can carry it; None for a state the word cannot have (or an unknown word)."""
    row = BY_WORD.get(word)
    if row is None or isinstance(saved, bool) or saved not in row.states:
        return row.states[0] if row is not None and len(row.states) == 1 else None
    return int(saved)


class Perf(NamedTuple):
    """One perfdata label of the operator contract (labels never change)."""

    label: str
    unit: str
    #: The Verdict attribute that holds it.
    attr: str
    what: str
    source: str
    #: The check's options that set its warning and critical ranges (Nagios range syntax); () when none do.
    ranges: tuple[str, ...] = ()


PERFDATA = (
    Perf("tokens_per_second", "", "tokens_per_second", "generated tokens/s", "vllm:generation_tokens_total"),
    Perf("prompt_tokens_per_second", "", "prompt_tokens_per_second", "prompt tokens/s", "vllm:prompt_tokens_total"),
    Perf("steps_per_second", "", "steps_per_second", "engine steps/s", "vllm:iteration_tokens_total_count"),
    Perf("running", "", "running", "requests running", "vllm:num_requests_running"),
    Perf("waiting", "", "waiting", "requests queued", "vllm:num_requests_waiting",
         ("--waiting-warning", "--waiting-critical")),
    Perf("kv_cache_usage", "%", "kv_cache", "%, fullest engine", "vllm:kv_cache_usage_perc",
         ("--kv-warning", "--kv-critical")),
    Perf("probe_seconds", "s", "probe_seconds", "probe latency, s", "only when the idle probe ran"),
    Perf("stalled_seconds", "s", "stalled_seconds", "s without progress", "while work is present"),
)


# --------------------------------------------------------------------------- what a verdict asks the caller to do

#: Idle: a 1-token completion would prove the engine answers.
PROBE = "probe"
#: A stall whose waiting work is all deferred (check_vllm.judge.quiet.deferred): a probe tells a wait from a hang.
PROBE_DEFERRED = "probe deferred"
#: No proof either way yet (no usable baseline, work present): read /metrics again after a pause.
REREAD = "reread"
#: The idle probe went unanswered: a reading now tells a stalled engine from a slow one.
CONFIRM = "confirm"
#: A first look a restart can fool (nothing listens and no process, a reset before any answer, right after
#: the server was up): look again a moment later (Options.look_again); a caller that cannot wait leaves it
#: to its next run, which the memory makes the second look.
LOOK_AGAIN = "look again"
