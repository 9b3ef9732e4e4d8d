"""The check's figures held against the server and the load.

- tokens/s: each busy result's perfdata against (a) the two readings the check saved (its own arithmetic)
  and (b) the server's generation counter as the soak's sampler read it, interpolated at the same two
  instants (an independent look at the same interval);
- running + waiting: the perfdata against the sampler's reading nearest in time, and against the requests
  the load had in flight at the server then;
- generated tokens: the server's counter over stretches that begin and end with nothing in flight, against
  the load's log (a lower bound: what clients saw; an upper bound: what they asked for).
"""

from __future__ import annotations

import itertools
import statistics

from tests.rig.incident import word_of

from .sampler import Sampler
from .traffic import Req

BOUND = 0.05
#: The share of results whose running+waiting may differ from the server's gauges nearest in time. The sampler
#: reads every 0.5 s and the load's clients send in bursts, so a gauge can change between the check's read and
#: the nearest sample: 2 or 3 results of 60-120 in measured runs. Perfdata taken from anything but the reading
#: (the previous one, running alone) differs on most busy results.
SKEW_SHARE = 0.10


def _saved_for(s: Sampler, r: dict):
    start = r.get("start") or r["at"] - 5
    inside = [x for x in s.saved if start - 0.05 <= x.at <= r["at"] + 0.05]
    return inside[-1] if inside else None


def _nearest(s: Sampler, t: float):
    pts = [p for p in s.points if p.latency >= 0]
    p = min(pts, key=lambda p: abs(p.at - t), default=None)
    return p if p is not None and abs(p.at - t) <= s.every + 0.3 else None


def tokens_report(s: Sampler, results: list[dict]) -> dict:
    rows = []
    for r in results:
        tps = r["perf"].get("tokens_per_second")
        saved = _saved_for(s, r)
        if word_of(r["output"]) != "busy" or tps is None or saved is None or saved.previous_at is None:
            continue
        dt = saved.at - saved.previous_at
        near = _nearest(s, saved.at)
        start = near.start if near else None
        a, b = s.generated_at(saved.previous_at, start), s.generated_at(saved.at, start)
        if dt <= 0 or a is None or b is None or saved.generated is None or saved.previous_generated is None:
            continue
        rows.append({"at": saved.at, "seconds": dt, "perf": tps,
                     "own": (saved.generated - saved.previous_generated) / dt, "server": (b - a) / dt})
    perf_tokens = sum(x["perf"] * x["seconds"] for x in rows)
    server_tokens = sum(x["server"] * x["seconds"] for x in rows)
    devs = [abs(x["perf"] / x["server"] - 1) for x in rows if x["server"] > 0]
    problems = [f"perfdata {x['perf']:.1f} tokens/s vs the check's own readings {x['own']:.1f}" for x in rows
                if abs(x["perf"] - x["own"]) > max(0.5, 0.01 * x["own"])]
    agg = perf_tokens / server_tokens - 1 if server_tokens else None
    if agg is None or abs(agg) > BOUND:
        problems.append(f"perfdata tokens over {len(rows)} busy intervals vs the server's counters: "
                        f"{perf_tokens:.0f} vs {server_tokens:.0f} ({agg if agg is None else f'{agg:+.1%}'})")
    return {"intervals": len(rows), "perf_tokens": perf_tokens, "server_tokens": server_tokens, "aggregate": agg,
            "median_dev": statistics.median(devs) if devs else None,
            "p90_dev": sorted(devs)[int(0.9 * (len(devs) - 1))] if devs else None,
            "within_5pct": sum(1 for d in devs if d <= BOUND), "compared": len(devs), "problems": problems}


def gauges_report(s: Sampler, results: list[dict], in_flight) -> dict:
    """in_flight(t): requests the load had at the server at t."""
    rows = []
    for r in results:
        saved = _saved_for(s, r)
        if "running" not in r["perf"] or saved is None:
            continue
        near = _nearest(s, saved.at)
        work = r["perf"]["running"] + r["perf"].get("waiting", 0)
        rows.append((work, near.running + near.waiting if near else None, in_flight(saved.at),
                     r["perf"]["running"] == saved.running and r["perf"].get("waiting", 0) == saved.waiting))
    with_server = [x for x in rows if x[1] is not None]
    sum_perf, sum_server = sum(x[0] for x in with_server), sum(x[1] for x in with_server)
    sum_load = sum(x[2] for x in rows)
    problems = [f"{sum(1 for x in rows if not x[3])} results whose perfdata running/waiting is not the reading "
                "the check saved"] if any(not x[3] for x in rows) else []
    agg = sum_perf / sum_server - 1 if sum_server else None
    # judged by how many results differ, not by the sums: with ~1 request a result, 3 skewed results of 120 moved
    # the sums by 9 % in one CI run while 117 were equal
    equal = sum(1 for x in with_server if x[0] == x[1])
    differ = len(with_server) - equal
    if differ > SKEW_SHARE * len(with_server):
        problems.append(f"perfdata running+waiting vs the server's gauges: {differ} of {len(with_server)} results "
                        f"differ ({sum_perf:.0f} vs {sum_server:.0f}, {agg if agg is None else f'{agg:+.1%}'})")
    return {"results": len(rows), "equal_to_server": equal,
            "compared_to_server": len(with_server), "perf_sum": sum(x[0] for x in rows), "server_sum": sum_server,
            "aggregate_vs_server": agg, "load_sum": sum_load,
            "equal_to_load": sum(1 for x in rows if x[0] == x[2]),
            "aggregate_vs_load": sum(x[0] for x in rows) / sum_load - 1 if sum_load else None, "problems": problems}


def load_tokens_report(s: Sampler, reqs: list[Req], in_flight) -> dict:
    """The server's generated tokens over quiet-to-quiet stretches of one process vs the load's log."""
    quiet = [p for p in s.points if p.latency >= 0 and p.running == 0 and p.waiting == 0 and in_flight(p.at) == 0]
    lo = hi = server = probes = 0.0
    spans = 0
    for a, b in itertools.pairwise(quiet):
        if a.start != b.start or b.generated == a.generated and b.probes == a.probes:
            continue
        inside = [q for q in reqs if a.at <= q.sent < b.at]
        if any(q.end is None or q.end >= b.at for q in inside):
            continue
        spans += 1
        server += b.generated - a.generated
        probes += b.probes - a.probes
        for q in inside:
            got = q.usage if q.usage is not None and q.outcome == "ok" else q.tokens
            lo += got if q.outcome in ("ok", "abandoned", "failed") else 0
            hi += (q.usage if q.outcome == "ok" and q.usage is not None else
                   q.max_tokens if q.outcome in ("abandoned", "failed", "ok") else 0)
    lo_all, hi_all = lo + 0, hi + probes  # a probe generates at most its one token
    problems = []
    if spans and not lo_all <= server <= hi_all:
        problems.append(f"the server generated {server:.0f} tokens where the load saw {lo:.0f} and asked at most "
                        f"{hi:.0f} (+{probes:.0f} probe tokens)")
    return {"spans": spans, "server": server, "load_seen": lo, "load_asked": hi, "probe_tokens_max": probes,
            "server_over_seen": server / lo if lo else None, "problems": problems}
