"""The charts of one job, declared once, and the plugins.d text that defines and updates them.

Every chart is `vllm_<job>.<id>` with context `vllm.<id>`. Counters go out raw as `incremental`
dimensions (Netdata computes the rate and copes with resets); fractions and seconds go out as scaled
integers with a divisor, because SET only takes integers. Where a server runs several data-parallel
engines, the charts marked `per_engine` get one more dimension per engine, for at most MAX_ENGINES
engines: the totals always cover every engine, so nothing is lost beyond the bound but the split.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from check_vllm.contract.safe_text import one_line, without_userinfo
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CODE_NAMES, WORDS

from .config import Job

PLUGIN = "vllm.plugin"
MODULE = "vllm"
PRIORITY = 70000
#: Bound on per-engine dimensions per chart (a data-parallel server rarely runs more than 8 engines).
MAX_ENGINES = 8


@dataclass(frozen=True)
class Dim:
    id: str
    name: str
    algorithm: str = "absolute"
    divisor: int = 1
    #: Reading field summed over engines (None: the value comes from the verdict).
    field: str | None = None
    #: Set on a per-engine dimension: the engine it shows.
    engine: str | None = None


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    units: str
    family: str
    kind: str  # line | area | stacked
    dims: tuple[Dim, ...]
    per_engine: bool = False
    needs_metrics: bool = True  # not in proxy mode, which never reads /metrics
    needs_probe: bool = False  # only when the job probes


def word_id(word: str) -> str:
    return word.replace(" ", "_")


def state_value(code: int) -> int:
    """The current verdict's dimension on vllm.state: 1 + its state (1 OK, 2 WARNING, 3 CRITICAL, 4 UNKNOWN), so
    that an alarm on the word's dimension follows the state (check_vllm.netdata.alarms); every other word is 0."""
    return 1 + code


CHARTS: tuple[Chart, ...] = (
    Chart("state", "LLM server verdict (the current word at 1 + its state: "
          + ", ".join(f"{state_value(code)} {name}" for code, name in enumerate(CODE_NAMES)) + ")",
          "state", "health", "line", tuple(Dim(word_id(w), w) for w in WORDS), needs_metrics=False),
    Chart("requests", "LLM server requests", "requests", "requests", "line",
          (Dim("running", "running", field="running"), Dim("waiting", "waiting", field="waiting")), per_engine=True),
    Chart("tokens", "LLM server tokens processed", "tokens/s", "throughput", "line",
          (Dim("prompt", "prompt", "incremental", field="prompt_tokens"),
           Dim("generation", "generation", "incremental", field="generation_tokens")), per_engine=True),
    Chart("steps", "LLM server engine steps that emitted output", "steps/s", "throughput", "line",
          (Dim("steps", "steps", "incremental", field="steps"),), per_engine=True),
    Chart("kv_cache", "LLM server KV-cache usage (the fullest engine)", "percentage", "cache", "line",
          (Dim("kv_cache", "usage", divisor=1000, field="kv_cache"),), per_engine=True),
    Chart("probe", "LLM server idle probe latency (a 1-token completion, only sent when idle)", "seconds", "health",
          "line", (Dim("latency", "latency", divisor=1000),), needs_probe=True),
    Chart("stalled", "LLM server time without progress while work is present", "seconds", "health", "line",
          (Dim("stalled", "stalled", divisor=1000),), needs_metrics=False),
)


def charts_for(job: Job) -> tuple[Chart, ...]:
    return tuple(c for c in CHARTS
                 if (not c.needs_metrics or not job.proxy) and (not c.needs_probe or job.completes_when_idle))


def _q(text: str) -> str:
    """A protocol word: one line (the rule of every text we show), quoted, without the quotes and
    backslashes the plugins.d parser would choke on."""
    return "'" + re.sub(r"['\"\\]", "", one_line(text, pipe=False))[:200] + "'"


def engine_id(engine: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", engine) or "_"


def _engine_dims(chart: Chart, engines: Iterable[str]) -> list[Dim]:
    return [Dim(f"{d.id}_engine_{engine_id(e)}", f"engine {e} {d.name}", d.algorithm, d.divisor, d.field, e)
            for e in engines for d in chart.dims]


def define(job: Job, update_every: int, engines: tuple[str, ...] = (), model: str | None = None) -> str:
    """CHART, CLABEL and DIMENSION lines for every chart of the job (sent again when engines or model change)."""
    out: list[str] = []
    for n, chart in enumerate(charts_for(job)):
        out.append(
            f"CHART {job.chart_type}.{chart.id} '' {_q(chart.title)} {_q(chart.units)} {_q(chart.family)} "
            f"'vllm.{chart.id}' {chart.kind} {PRIORITY + n} {update_every} '' {PLUGIN} {MODULE}")
        out.append(f"CLABEL 'job' {_q(job.name)} 1")
        out.append(f"CLABEL 'url' {_q(without_userinfo(job.url))} 1")
        out.append(f"CLABEL 'model' {_q(model or job.model or 'unknown')} 1")
        out.append("CLABEL_COMMIT")
        dims = list(chart.dims) + (_engine_dims(chart, engines) if chart.per_engine else [])
        out.extend(f"DIMENSION {d.id} {_q(d.name)} {d.algorithm} 1 {d.divisor} ''" for d in dims)
    return "\n".join(out) + "\n"


def _scaled(value: float, dim: Dim, field: str | None) -> int:
    if field == "kv_cache":
        value *= 100.0  # a fraction; the chart is in percent
    return int(round(value * dim.divisor))


def collect(job: Job, verdict: Verdict, reading: Reading | None, engines: tuple[str, ...],
            probe_seconds: float | None) -> dict[str, dict[str, int]]:
    """The flat {chart: {dimension: int}} of one tick. Charts without a value this tick are left out."""
    data: dict[str, dict[str, int]] = {
        "state": {word_id(w): state_value(verdict.code) if w == verdict.word else 0 for w in WORDS},
        "stalled": {"stalled": int(round((verdict.stalled_seconds or 0.0) * 1000))},
    }
    if probe_seconds is not None and job.completes_when_idle:
        data["probe"] = {"latency": int(round(probe_seconds * 1000))}
    if reading is None or job.proxy:
        return data
    for chart in charts_for(job):
        if not chart.needs_metrics or chart.needs_probe:
            continue
        values: dict[str, int] = {}
        for dim in chart.dims:
            got = [getattr(e, dim.field) for e in reading.engines.values()]  # type: ignore[arg-type]
            got = [v for v in got if v is not None]
            if got:
                total = max(got) if dim.field == "kv_cache" else sum(got)
                values[dim.id] = _scaled(total, dim, dim.field)
        if chart.per_engine:
            for dim in _engine_dims(chart, engines):
                e = reading.engines.get(dim.engine or "")
                v = getattr(e, dim.field) if e is not None else None  # type: ignore[arg-type]
                if v is not None:
                    values[dim.id] = _scaled(v, dim, dim.field)
        if values:
            data[chart.id] = values
    return data


def update(job: Job, data: dict[str, dict[str, int]], since_usec: dict[str, int]) -> str:
    """BEGIN / SET / END for each chart with data; `since_usec[chart]`: microseconds since its previous update."""
    out: list[str] = []
    for chart in charts_for(job):
        values = data.get(chart.id)
        if not values:
            continue
        since = f" {since_usec[chart.id]}" if chart.id in since_usec else ""
        out.append(f"BEGIN {job.chart_type}.{chart.id}{since}")
        out.extend(f"SET {dim} = {value}" for dim, value in values.items())
        out.append("END")
    return "\n".join(out) + "\n" if out else ""
