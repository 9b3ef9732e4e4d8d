"""The agent's latest verdict as Prometheus series (GET /metrics of --probe-listen or --metrics-listen). Pure.

A Scrape (what the agent knows when Prometheus asks) -> the text format, made by prometheus_client from one
collector on a private registry: the global one would add the process's own series, and an embedding program's.
A value the verdict does not have is absent, never 0 or NaN: 0 running or 0 s stalled would read as a fact. A
stale verdict is no verdict, as on the agent's TCP side (check_vllm.haproxy.watch): only the agent's own series
remain, and check_vllm_agent_up says 0.

Cardinality is fixed: one server per agent, one check_vllm_verdict series per word of the contract (1 for the
verdict's, 0 for the others), one series per other name. Labels: `server`, the URL without userinfo, query or
fragment (a secret can hide there); `engine`, a key of the engine table or ""; `model`, server text, so cleaned
(one line, no control character) and cut to MODEL_CAP, the last one named kept while a run names none.
prometheus_client is optional (extra `metrics`) and imported by the agent only, never by the one-shot check.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from check_vllm.contract.engines import BY_KEY
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CRITICAL, PERFDATA, RESTARTABLE, VERDICTS

if TYPE_CHECKING:
    from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

#: A model name is the server's text (a path given to `vllm serve` can be 200 characters long).
MODEL_CAP = 64
#: The URL is the operator's, checked at start; the cap only bounds the page.
SERVER_CAP = 200
#: What --metrics-listen and GET /metrics need, where it is missing.
MISSING = "the Python package prometheus-client is not installed (pip install 'check_vllm[metrics]', " \
          "or apt install python3-prometheus-client)"
#: Perfdata label (check_vllm.contract.vocab.PERFDATA) -> its series: the same Verdict field, the same meaning.
#: The idle completion's latency is kept apart, with its time: it is measured at most once per --idle-completion-every.
FROM_PERFDATA = {
    "running": "check_vllm_requests_running",
    "waiting": "check_vllm_requests_waiting",
    "stalled_seconds": "check_vllm_stalled_seconds",
    "tokens_per_second": "check_vllm_tokens_per_second",
    "prompt_tokens_per_second": "check_vllm_prompt_tokens_per_second",
    "steps_per_second": "check_vllm_steps_per_second",
    "kv_cache_usage": "check_vllm_kv_cache_usage_percent",
}
IDLE_PERF = "probe_seconds"
SERVER_LABELS = ("server", "engine", "model")


class Named(NamedTuple):
    """Whose server it is, as the labels say: an engine key and the model, each the last one known."""

    engine: str = ""
    model: str = ""


class IdleCompletion(NamedTuple):
    """The last idle completion: how long it took (or went unanswered), and when (wall clock)."""

    seconds: float
    at: float


class Scrape(NamedTuple):
    """What the agent knows at a scrape."""

    #: The server's URL as given (its label is made here).
    url: str
    #: The latest verdict; None before the first, or when it is stale.
    verdict: Verdict | None = None
    named: Named = Named()
    idle: IdleCompletion | None = None
    #: The wall-clock time of the latest verdict, and its age on the monotonic clock; None before the first.
    judged_at: float | None = None
    age: float | None = None
    stale_after: float = 0.0
    judgements: int = 0
    errors: int = 0


def available() -> bool:
    """Whether the page can be made: the agent asks once, at its start (a daemon: the import is paid once)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def server_label(url: str) -> str:
    """Scheme, host, port and path: never userinfo, query or fragment."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    host = f"[{host}]" if ":" in host else host
    return clean(f"{parts.scheme.lower()}://{host}{f':{port}' if port else ''}{parts.path.rstrip('/')}", SERVER_CAP)


def named(before: Named, verdict: Verdict, reading: Reading | None) -> Named:
    """The labels after one judgement: the reading's engine and model, else the baseline's, else those before."""
    read = reading or (verdict.memory.baseline.reading if verdict.memory.baseline is not None else None)
    engine = verdict.engine or (read.engine if read is not None else "")
    model = clean(read.model, MODEL_CAP) if read is not None and read.model else ""
    return Named(engine if engine in BY_KEY else before.engine, model or before.model)


def render(scrape: Scrape) -> tuple[bytes, str]:
    """The page and its Content-Type."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    class Collector:
        def collect(self) -> Iterator[Metric]:
            return families(scrape)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


def families(scrape: Scrape) -> Iterator[Metric]:
    """The agent's own series (labelled by server only), then the verdict's, while there is a current one."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    server = server_label(scrape.url)
    up = GaugeMetricFamily("check_vllm_agent_up", "1: the agent's verdict is current; 0: none yet, or its judging "
                           "loop is stale (the check cannot see)", labels=["server"])
    up.add_metric([server], 0.0 if scrape.verdict is None else 1.0)
    yield up
    if scrape.judged_at is not None and scrape.age is not None:
        yield _one(GaugeMetricFamily, "check_vllm_last_judgement_timestamp_seconds", "when the latest verdict was "
                   "judged (Unix time)", ["server"], [server], scrape.judged_at)
        yield _one(GaugeMetricFamily, "check_vllm_agent_verdict_age_seconds", "seconds since the latest verdict",
                   ["server"], [server], max(scrape.age, 0.0))
    yield _one(GaugeMetricFamily, "check_vllm_agent_stale_after_seconds", "a verdict older than this is no verdict",
               ["server"], [server], scrape.stale_after)
    yield _one(CounterMetricFamily, "check_vllm_agent_judgements", "verdicts judged since the agent started",
               ["server"], [server], scrape.judgements)
    yield _one(CounterMetricFamily, "check_vllm_agent_judgement_errors", "judgements that failed on a bug of the "
               "agent's (its log says which)", ["server"], [server], scrape.errors)
    if scrape.verdict is not None:
        yield from _verdict(scrape.verdict, [server, scrape.named.engine, scrape.named.model], scrape.idle)


def _verdict(verdict: Verdict, labels: list[str], idle: IdleCompletion | None) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    words = GaugeMetricFamily("check_vllm_verdict", "1 for the verdict's word, 0 for every other word of the "
                              "contract", labels=[*SERVER_LABELS, "word"])
    for row in VERDICTS:
        words.add_metric([*labels, row.word], 1.0 if row.word == verdict.word else 0.0)
    yield words
    yield _one(GaugeMetricFamily, "check_vllm_state", "the verdict's state: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN",
               SERVER_LABELS, labels, verdict.code)
    proven = verdict.word in RESTARTABLE and verdict.code == CRITICAL
    yield _one(GaugeMetricFamily, "check_vllm_restartable", "1: a restartable word at CRITICAL, proven: "
               "check_vllm_restart would restart on it", SERVER_LABELS, labels, 1.0 if proven else 0.0)
    for perf in PERFDATA:
        value = getattr(verdict, perf.attr)
        if perf.label in FROM_PERFDATA and value is not None:
            yield _one(GaugeMetricFamily, FROM_PERFDATA[perf.label], f"{perf.what}: the check's perfdata {perf.label}",
                       SERVER_LABELS, labels, value)
    if idle is not None:
        yield _one(GaugeMetricFamily, "check_vllm_idle_completion_seconds", "how long the last idle completion (a "
                   "1-token completion sent only when idle) took, or went unanswered", SERVER_LABELS, labels,
                   idle.seconds)
        yield _one(GaugeMetricFamily, "check_vllm_idle_completion_timestamp_seconds", "when the judgement that sent "
                   "it ended (Unix time)", SERVER_LABELS, labels, idle.at)


def _one(kind: type[GaugeMetricFamily | CounterMetricFamily], name: str, text: str,
         label_names: tuple[str, ...] | list[str], labels: list[str], value: float) -> Metric:
    family = kind(name, text, labels=list(label_names))
    family.add_metric(labels, float(value))
    return family
