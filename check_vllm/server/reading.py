"""An engine's /metrics text (vLLM's, llama.cpp's: check_vllm.contract.engines) -> one Reading: the few numbers
the verdict needs, per engine.

Only the wanted families are handed to prometheus_client's parser: a real page is ~55 KB of
histograms we never look at, and filtering lines first makes parsing ~10x cheaper.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract.engines import BY_KEY, DEFAULT, ENGINES, ROW_OF, Engine
from check_vllm.contract.numbers import finite
from check_vllm.contract.safe_text import clean
from check_vllm.contract.values import COUNTER_FIELDS, PROGRESS_FIELDS, EngineReading, Reading
from check_vllm.server.promtext import Sample, sample

#: Sample name (`name|label=value` where the row splits a family) -> field of EngineReading, every engine's
#: (check_vllm.contract.engines).
_SAMPLES = {name: field for row in ENGINES for name, field in row.samples.items()}
# Counters whose `_created` sample marks the birth of the process that owns them.
_CREATED = frozenset(name for row in ENGINES for name in row.created)
#: Samples whose label names the process that owns an engine's counters, with that label.
_OWNER = {row.owner[0]: row.owner[1] for row in ENGINES if row.owner[0]}
_SLEEP = "vllm:engine_sleep_state"
_START = "process_start_time_seconds"
#: Waiting requests by reason: "deferred" ones wait on a KV transfer (or a LoRA budget), not for capacity.
_BY_REASON = "vllm:num_requests_waiting_by_reason"
#: An RL trainer moving weights into the server (vllm/entrypoints/rl/online/metrics.py, 0.32 on).
_WEIGHTS = "vllm:rl_weight_update_operations_in_flight"
#: Its operations finished, by operation and outcome: what moves while weights really move.
_WEIGHT_OPS = "vllm:rl_weight_update_operations_total"
# The sample names the check reads (a line is wanted when its name, up to `{` or ` `, is one): the parser's filter.
WANTED = frozenset(name.split("|", 1)[0] for name in _SAMPLES) | _CREATED | set(_OWNER) | {
    name for row in ENGINES for name in row.also}


def restrictable(row: Engine) -> frozenset[str]:
    """The sample names the restricted page asks `row`'s server for (api.restricted_path): prometheus_client's
    `name[]` filter serves only those."""
    names = {name.split("|", 1)[0] for name in row.samples} | set(row.created) | ({row.owner[0]} - {""})
    return frozenset(names | row.also)


#: vLLM's (the restricted page asked of a server whose engine is not known yet).
RESTRICTABLE = restrictable(DEFAULT)


class NotMetrics(ValueError):
    """The page is not a vLLM Prometheus page (HTML, garbage, or no `vllm:` family)."""


def _wanted(line: str) -> bool:
    if not line or line[0] == "#":
        return False
    end = len(line)
    for stop in ("{", " "):
        i = line.find(stop)
        if 0 < i < end:
            end = i
    return line[:end] in WANTED


class _Collected(NamedTuple):
    values: dict[str, dict[str, float]]
    created: dict[str, float]
    asleep: dict[str, bool]
    deferred: dict[str, float]
    process_start: float | None
    model: str | None
    weight_updates: float | None
    weight_ops: float | None


def _collect(samples: list[Sample]) -> _Collected:
    """The wanted samples, per engine label."""
    out = _Collected({}, {}, {}, {}, None, None, None, None)
    process_start, model, weights, ops = None, None, None, None
    for name, labels, raw in samples:
        value = finite(raw)  # Prometheus allows NaN and +Inf: neither is a usable count or gauge
        if name == _START:
            process_start = value
            continue
        if name == _WEIGHTS:
            weights = (weights or 0.0) + max(value or 0.0, 0.0)
            continue
        if name == _WEIGHT_OPS:
            ops = (ops or 0.0) + max(value or 0.0, 0.0)
            continue
        row = ROW_OF.get(name, DEFAULT)
        engine = clean(labels.get(row.engine_label, ""), 40) if row.engine_label else ""
        model = model or labels.get("model_name") or None  # protocol data: the probe asks for it as it is
        if value is None:
            continue
        if name in _OWNER:
            owner = labels.get(_OWNER[name], "")
            if owner.isdigit():
                out.created[engine] = max(out.created.get(engine, 0.0), float(owner))
        elif name in _CREATED:
            out.created[engine] = max(out.created.get(engine, value), value)
        elif name == _SLEEP:
            if labels.get("sleep_state") == "awake":
                out.asleep[engine] = value < 0.5
        elif name == _BY_REASON:
            if labels.get("reason") == "deferred":
                out.deferred[engine] = max(value, 0.0)
        else:
            key = _SAMPLES.get(f"{name}|{row.split}={labels.get(row.split)}" if row.split else name) \
                or _SAMPLES.get(name)
            if key is None:
                continue
            fields = out.values.setdefault(engine, {})
            fields[key] = fields.get(key, 0.0) + value if key in row.summed else value
    return out._replace(process_start=process_start, model=model, weight_updates=weights, weight_ops=ops)


def _never_served(fields: dict[str, float]) -> bool:
    """Counters there, all at zero: an engine that has had no request yet. In prometheus_client's
    multiprocess mode (vLLM with --api-server-count > 1 or data parallel) an engine's request gauges
    appear only with its first request, so its page has no work to show: it has none."""
    counters = [fields[f] for f in COUNTER_FIELDS if f in fields]
    return bool(counters) and not any(counters) and not fields.get("kv_cache")


def _rounded(values: dict[str, dict[str, float]], row: Engine) -> dict[str, str]:
    """Drop the counters a page printed rounded (row.counter_digits: llama.cpp's 6 significant digits, `1e+09`):
    past 10**digits a printed step is many steps, so standing still proves nothing. Per engine, what was dropped
    (for the words), and nothing where the page prints exact values."""
    if not row.counter_digits:
        return {}
    limit, dropped = 10.0 ** row.counter_digits, {}
    for engine, fields in values.items():
        gone = [f"{f} {fields.pop(f):.{row.counter_digits}g}" for f in COUNTER_FIELDS if fields.get(f, 0.0) >= limit]
        if gone:
            dropped[engine] = f"{', '.join(gone)} printed with {row.counter_digits} significant digits"
    return dropped


def _usable(values: dict[str, dict[str, float]], row: Engine, coarse: Mapping[str, str]) -> None:
    """Raise NotMetrics for a page that cannot tell busy from stuck."""
    if not values:
        raise NotMetrics(f"no {row.prefix} request metrics on the page")
    for engine, fields in values.items():
        if "running" not in fields and "waiting" not in fields and not _never_served(fields) \
                and not row.lagging_gauges:  # a lagging gauge is not written yet: no proof either way
            where = f" for engine {engine}" if engine else ""
            raise NotMetrics(f"no {row.work}{where}: work unknown")
    # A page cut short or an exporter that lost its counters: no engine shows any progress signal.
    if not coarse and not any(f in fields for fields in values.values() for f in PROGRESS_FIELDS) and any(
        fields.get("running", 0.0) > 0 or fields.get("waiting", 0.0) > 0 for fields in values.values()
    ):
        raise NotMetrics("work but no progress counters on the page: cannot tell busy from stuck")


def _carries(text: str, row: Engine) -> bool:
    """The page holds a sample of `row`'s families (a line that starts with its prefix)."""
    return f"\n{row.prefix}" in text or text.startswith(row.prefix)


def _row(text: str, named: Engine | None) -> Engine:
    """The engine named, else the one whose prefix the page's samples carry (vLLM's where none does)."""
    if named is not None:
        return named
    return next((row for row in ENGINES[1:] if _carries(text, row)), DEFAULT)


def parse(text: str, named: Engine | None = None) -> Reading:
    """Parse a /metrics page, as the `named` engine's (else the engine whose families it carries). Raises
    NotMetrics when it holds no usable family of that engine."""
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()  # a line is complete only with its newline: a cut body must not yield a cut number
    row = _row(text, named)
    lines = [line for line in lines if _wanted(line)]
    if named is not None:  # only its own families: another engine's page is not its
        lines = [line for line in lines if ROW_OF.get(line.split("{", 1)[0].split(" ", 1)[0], row) is row]
    if not lines and not (row.lagging_gauges and _carries(text, row)):
        # a page with no sample of the engine's (SGLang's restricted page is empty by construction) is no reading;
        # an engine whose gauges lag shows only its other families before its first batch
        raise NotMetrics(f"no {row.prefix} metrics on the page")
    try:
        got = _collect([sample(line) for line in lines])
    except ValueError as err:
        raise NotMetrics(f"unparseable metrics: {err}") from None
    if not got.values and row.lagging_gauges:  # its page before its first batch: no gauge, no counter yet
        got.values[""] = {}
    coarse = _rounded(got.values, row)
    _usable(got.values, row, coarse)
    engines = {
        engine: EngineReading(
            running=max(fields.get("running", 0.0), 0.0),
            waiting=max(fields.get("waiting", 0.0), 0.0),
            steps=fields.get("steps"),
            step_tokens=fields.get("step_tokens"),
            generation_tokens=fields.get("generation_tokens"),
            prompt_tokens=fields.get("prompt_tokens"),
            finished=fields.get("finished"),
            kv_cache=fields.get("kv_cache"),
            preemptions=fields.get("preemptions"),
            asleep=got.asleep.get(engine),
            deferred=got.deferred.get(engine),
            created=got.created.get(engine),
            lagging_gauges=row.lagging_gauges or None,
            coarse=coarse.get(engine),
        )
        for engine, fields in sorted(got.values.items())
    }
    return Reading(engines=engines, process_start=got.process_start, model=got.model,
                   weight_updates=got.weight_updates, engine=row.key, weight_ops=got.weight_ops)


def owned(got: Reading, headers: Mapping[str, str]) -> Reading:
    """The reading, its engines' counters owned by the process a response header names (the row's owner_header)."""
    name = BY_KEY[got.engine].owner_header
    raw = headers.get(name, "").strip()[:20] if name else ""
    owner = finite(int(raw)) if raw.isdigit() else None
    if owner is None:
        return got
    return got._replace(engines=MappingProxyType({n: e._replace(created=owner) for n, e in got.engines.items()}))
