"""The soak judged: per window what the check said and what the handler did, the check's inference
requests counted at the server, and the perfdata held against the server's counters and the load's log.

analyse() returns plain data (written as JSON); each list named `problems` is what a test asserts empty.
"""

from __future__ import annotations

import itertools

from tests.rig.incident import verdict_of, word_of

from .faults import ALLOWED, EXPECTED
from .sampler import Sampler
from .traffic import Req

#: perfdata vs the server's counters: the bound of the issue



def _seq(results: list[dict]) -> str:
    """'busy x3 > stalling/W > stuck/C > stuck/C! > starting/W!' (W, C, U: the state; !: HARD, not OK)."""
    def one(r: dict) -> str:
        mark = "" if r["state"] == 0 else "/" + "OWCU"[int(r["state"])] + ("!" if r.get("hard") else "")
        return word_of(r["output"]) + mark
    out = []
    for x, g in itertools.groupby(one(r) for r in results):
        n = len(list(g))
        out.append(f"{x} x{n}" if n > 1 else x)
    return " > ".join(out) or "-"


def _in(t: float, t0: float, t1: float) -> bool:
    return t0 <= t < t1


# --------------------------------------------------------------------------- warnings and their causes


def cause_of(r: dict, run, restarts: list[float]) -> str | None:
    """A named cause for a WARNING in a normal or after window, from evidence the check did not use."""
    word = word_of(r["output"])
    start = r.get("start") or r["at"] - 1
    if word == "starting" and any(0 <= start - t <= run.soak.start_grace for t in restarts):
        return "server process younger than --start-grace after a restart"
    if word == "stopping" and any(0 <= start - t <= run.soak.start_grace for t in restarts):
        return "the old server process stopping after a restart"
    if word == "stalling":
        pts = run.sampler.served(start - 2 * run.soak.check_interval - 2, r["at"])
        if len(pts) >= 2 and pts[-1].start == pts[0].start and pts[-1].generated == pts[0].generated:
            return f"no token in the server's own counters for {pts[-1].at - pts[0].at:.1f} s"
        last = next((s for s in reversed(run.sampler.saved) if s.at <= r["at"] + 0.5), None)
        if last and last.previous_at:
            a = run.sampler.generated_at(last.previous_at, _start_near(run.sampler, last.at))
            b = run.sampler.generated_at(last.at, _start_near(run.sampler, last.at))
            if a is not None and b is not None and abs(b - a) < 1:
                return f"no token in the server's own counters between the check's readings ({last.at - last.previous_at:.1f} s)"
    if word == "unresponsive":
        slow = [p for p in run.sampler.points if start - 5 <= p.at <= r["at"] and (p.latency < 0 or p.latency > 2)]
        if slow:
            return f"/metrics slow or silent at the server ({len(slow)} samples)"
    return None


def _start_near(s: Sampler, t: float) -> float | None:
    pts = [p for p in s.points if p.latency >= 0]
    if not pts:
        return None
    return min(pts, key=lambda p: abs(p.at - t)).start


# --------------------------------------------------------------------------- windows


def window_report(run, win, results: list[dict], history: list[dict]) -> dict:
    res = [r for r in results if _in(r["at"], win.t0, win.t1)]
    rs = [e for e in history if _in(e["at"], win.t0, win.t1)]
    restart_times = [e.get("done") or e["at"] for e in history]
    restart_times += [f.record["recovered"] for f in (w.fault for w in run.windows if w.fault)
                      if f.kind == "operator" and "recovered" in f.record]
    rec = {"name": win.name, "kind": win.kind, "from": win.t0 - run.w.t0, "to": win.t1 - run.w.t0,
           "seconds": win.t1 - win.t0, "checks": len(res), "sequence": _seq(res),
           "states": {s: sum(1 for r in res if r["state"] == i) for i, s in enumerate(("OK", "WARNING", "CRITICAL",
                                                                                      "UNKNOWN"))},
           "restarts": [{"at": e["at"] - run.w.t0, "verdict": e.get("verdict")} for e in rs], "problems": [],
           "warnings": []}
    if win.kind in ("normal", "after"):
        for r in res:
            if r["state"] == 2 or r["state"] == 3:
                rec["problems"].append(f"{verdict_of(r)} in a {win.kind} window: {r['output'][:140]}")
            elif r["state"] == 1:
                cause = cause_of(r, run, restart_times)
                rec["warnings"].append({"output": r["output"][:140], "cause": cause})
                if cause is None:
                    rec["problems"].append(f"WARNING without a named cause: {r['output'][:140]}")
        if rs:
            rec["problems"].append(f"restart in a {win.kind} window: {rs}")
    if win.kind == "boot" and rs:
        rec["problems"].append(f"restart while the model loaded: {rs}")
    if win.kind == "fault":
        rec.update(fault_report(run, win, res, history))
    return rec


def fault_report(run, win, res: list[dict], history: list[dict]) -> dict:
    f = win.fault
    rec = f.record
    n0 = rec.get("history_before", 0)
    ends = rec.get("first_ok", win.t1) + run.soak.check_interval * 5 + 1  # through the after window
    new = [e for e in history[n0:] if e["at"] < ends]
    want, verdict = EXPECTED[f.kind]
    t = rec["injected"]
    crit = next((r for r in res if r["state"] == 2), None)
    hard = next((r for r in res if r["state"] == 2 and r["hard"]), None)
    problems = []
    if len(new) != want:
        problems.append(f"{f.kind}: {len(new)} restarts by the handler, expected {want}: {new}")
    if verdict and new and new[0].get("verdict") != verdict:
        problems.append(f"{f.kind}: restarted on {new[0].get('verdict')!r}, expected {verdict!r}")
    if verdict and (hard is None or word_of(hard["output"]) != verdict):
        problems.append(f"{f.kind}: no HARD CRITICAL {verdict} before the restart: {_seq(res)}")
    if not verdict and crit is not None:
        problems.append(f"{f.kind}: CRITICAL although no restart is due: {crit['output'][:140]}")
    odd = [word_of(r["output"]) for r in res if word_of(r["output"]) not in ALLOWED[f.kind]]
    if odd:
        problems.append(f"{f.kind}: verdicts outside {sorted(ALLOWED[f.kind])}: {sorted(set(odd))}")
    if new and any(e.get("rc") != 0 for e in new):
        problems.append(f"{f.kind}: the restart command failed: {new}")
    if f.kind == "operator" and new:
        problems.append("operator: the handler restarted a server an operator was restarting")
    return {"fault": f.kind, "hold": f.hold, "expected_restarts": want, "handler_restarts": len(new),
            "restart_verdicts": [e.get("verdict") for e in new],
            "to_critical": crit["at"] - t if crit else None, "to_hard_critical": hard["at"] - t if hard else None,
            "to_restart": new[0]["at"] - t if new else None, "to_ok": rec.get("first_ok", t) - t,
            "first_ok_output": rec.get("first_ok_output"), "operator": rec.get("operator"),
            "operator_seconds": rec.get("operator_seconds"), "autogroup": rec.get("autogroup"),
            "metrics_latency": rec.get("metrics_latency"), "problems": problems}


# --------------------------------------------------------------------------- the check's inference requests


def _on_idle(r: dict) -> bool:
    """The check probed on an idle reading: it says idle, or its status line names the probe it sent (after a
    restart: "restarted ... 0 running, 0 waiting; probe answered in 0.12 s"; a probe that got no answer, after
    which a second reading found work: "busy ... the probe got no answer"). The text only: the perfdata's
    probe_seconds label says the same, but a word in the text is what an operator reads."""
    return word_of(r["output"]) == "idle" or "probe" in r["output"].split("|", 1)[0]


def probes_report(run, results: list[dict], reqs: list[Req]) -> dict:
    """Each increment of the server's /v1/completions counter, given to the check run it fell in."""
    pts = [p for p in run.sampler.points if p.latency >= 0]
    spans: list[tuple[float, float]] = []  # one (after, until) per request the counter counted
    for a, b in itertools.pairwise(pts):
        d = b.probes - a.probes if b.start == a.start else b.probes
        spans += [(a.at, b.at + 0.1)] * int(max(d, 0))
    by_result: dict[int, int] = {}
    stray, ambiguous, in_flight = [], 0, 0
    last = results[-1]["at"] if results else float("inf")
    for a, b in spans:  # the check run(s) that overlap the sampler's interval in which the counter moved
        if a >= last:  # after the last result on record: a check still running when the stream stopped
            in_flight += 1
            continue
        cands = [i for i, r in enumerate(results) if (r.get("start") or r["at"] - 5) - 0.2 <= b and r["at"] >= a]
        if not cands:
            stray.append(b - run.w.t0)
            continue
        idle = [i for i in cands if word_of(results[i]["output"]) == "idle"]
        ambiguous += len(cands) > 1
        pick = (idle or cands)[-1]
        by_result[pick] = by_result.get(pick, 0) + 1
    counted = spans
    problems, overlapping = [], 0
    for i, n in by_result.items():
        r = results[i]
        if not _on_idle(r):
            problems.append(f"{n} inference request(s) during a check that said {verdict_of(r)}: {r['output'][:120]}")
        s, e = r.get("start") or r["at"] - 5, r["at"]
        running = [q for q in reqs if q.first is not None and q.first < s and (q.end is None or q.end > e)
                   and q.outcome not in ("rejected", "refused")]
        overlapping += any(q.sent < e and (q.end is None or q.end > s) for q in reqs)
        if running:
            problems.append(f"a probe while {len(running)} load request(s) ran through the whole check: "
                            f"{r['output'][:120]}")
    if stray:
        problems.append(f"{len(stray)} inference request(s) at the server outside any check run (at {stray[:5]})")
    idle = [r for r in results if word_of(r["output"]) == "idle"]
    busy = [r for i, r in enumerate(results) if i in by_result and not _on_idle(r)]
    named = [r for i, r in enumerate(results) if i in by_result and word_of(r["output"]) != "idle" and _on_idle(r)]
    return {"counted_at_server": len(counted), "idle_verdicts": len(idle), "probing_checks": len(by_result),
            "idle_readings": sum(1 for r in results if _on_idle(r)),
            "idle_without_counted_probe": sum(1 for i, r in enumerate(results)
                                              if word_of(r["output"]) == "idle" and i not in by_result),
            "sent_while_busy": len(busy),
            "probe_named_in_non_idle_verdict": [r["output"][:160] for r in named], "probing_checks_with_load_arriving": overlapping,
            "stray": len(stray), "ambiguous": ambiguous, "in_flight_at_end": in_flight,
            "before_the_sampler": int(pts[0].probes) if pts else 0, "problems": problems}


# --------------------------------------------------------------------------- the whole run


def analyse(run, schedule) -> dict:
    from .figures import gauges_report, load_tokens_report, tokens_report

    results = sorted(run.w.results(), key=lambda r: r["at"])
    history = run.w.history()
    reqs = run.traffic.requests()
    windows = [window_report(run, win, results, history) for win in run.windows if win.t1]
    outcomes = {k: sum(1 for q in reqs if q.outcome == k) for k in sorted({q.outcome for q in reqs})}
    kinds = {k: sum(1 for q in reqs if q.kind == k) for k in sorted({q.kind for q in reqs})}
    rejected_ok = sum(1 for q in reqs if q.kind == "toolong" and q.outcome == "rejected")
    too_long = sum(1 for q in reqs if q.kind == "toolong")
    unexpected_rejects = [q.words for q in reqs if q.kind != "toolong" and q.outcome == "rejected"]
    problems = [p for w in windows if w["kind"] == "boot" for p in w["problems"]]
    if run.error:
        problems.append(f"the run stopped early: {run.error}")
    answered = [q.words for q in reqs if q.kind == "toolong" and q.outcome == "ok"]
    if answered:
        problems.append(f"{len(answered)} too-long prompts were answered, not rejected (words: {answered[:5]})")
    done_faults = [w.fault.kind for w in run.windows if w.kind == "fault"]
    if len(done_faults) != len(schedule):
        problems.append(f"faults run: {done_faults}, scheduled: {[f.kind for f in schedule]}")
    return {
        "checks": len(results), "handler_restarts": len(history),
        "states": {s: sum(1 for r in results if r["state"] == i) for i, s in enumerate(("OK", "WARNING", "CRITICAL",
                                                                                        "UNKNOWN"))},
        "windows": windows,
        "false_criticals": sum(1 for w in windows if w["kind"] in ("normal", "after")
                               for p in w["problems"] if "CRITICAL" in p.split(" ", 2)[0]),
        "probes": probes_report(run, results, reqs),
        "tokens": tokens_report(run.sampler, results),
        "gauges": gauges_report(run.sampler, results, run.traffic.in_flight),
        "load_tokens": load_tokens_report(run.sampler, reqs, run.traffic.in_flight),
        "traffic": {"requests": len(reqs), "kinds": kinds, "outcomes": outcomes,
                    "unexpected_rejects_words": unexpected_rejects[:20],
                    "too_long": too_long, "too_long_rejected": rejected_ok,
                    "max_prompt_words": max((q.words for q in reqs if q.kind != "toolong"), default=0)},
        "samples": len(run.sampler.points), "saved_readings": len(run.sampler.saved), "problems": problems,
    }


def _f(x, fmt="{:.0f} s") -> str:
    return "-" if x is None else fmt.format(x)


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def markdown(res: dict) -> str:
    m = res.get("meta", {})
    lines = [f"# Soak: seed {m.get('seed')}, {m.get('minutes')} minutes", "", f"- settings: {m.get('settings')}",
             f"- schedule: {m.get('schedule')}", f"- wall: {_f(m.get('wall_seconds'))}; heavy lock: {m.get('lock')} "
             f"(waited {_f(m.get('lock_waited'))})",
             f"- checks run: {res['checks']} ({', '.join(f'{k} {v}' for k, v in res['states'].items())}); handler "
             f"restarts: {res['handler_restarts']}; false CRITICALs: {res['false_criticals']}; inference requests "
             f"the check sent while busy: {res['probes']['sent_while_busy']}", "",
             "## Windows", "", "| window | from | to | checks | OK/WARN/CRIT | restarts | verdicts |",
             "|---|---:|---:|---:|---|---:|---|"]
    for w in res["windows"]:
        st = w["states"]
        lines.append(f"| {w['name']} | {w['from']:.0f} | {w['to']:.0f} | {w['checks']} | {st['OK']}/{st['WARNING']}/"
                     f"{st['CRITICAL']} | {len(w['restarts'])} | {w['sequence'][:160]} |")
    lines += ["", "## Faults", "", "| fault | hold | restarts (expected) | to CRITICAL | to HARD CRITICAL | "
              "to restart | to OK | notes |", "|---|---:|---|---:|---:|---:|---:|---|"]
    for w in res["windows"]:
        if w["kind"] != "fault":
            continue
        # (supervisorctl's lines, one cell: a newline would end the table's row)
        note = ", ".join(f"`{line.strip()}`" for line in (w.get("operator") or "").splitlines() if line.strip())
        if w.get("metrics_latency"):
            ml = w["metrics_latency"]
            note = (f"/metrics median {_f(ml.get('before_median'), '{:.3f}')} s before, "
                    f"{_f(ml.get('during_median'), '{:.3f}')} s during (max {_f(ml.get('during_max'), '{:.2f}')} s); "
                    f"autogroup {w.get('autogroup')}")
        lines.append(f"| {w['fault']} | {_f(w['hold'] or None, '{:.1f} s')} | {w['handler_restarts']} "
                     f"({w['expected_restarts']}) {','.join(map(str, w['restart_verdicts']))} | "
                     f"{_f(w['to_critical'])} | {_f(w['to_hard_critical'])} | {_f(w['to_restart'])} | "
                     f"{_f(w['to_ok'])} | {note[:120]} |")
    p, t, g, lt = res["probes"], res["tokens"], res["gauges"], res["load_tokens"]
    lines += ["", "## Figures", "",
              f"- inference requests counted at the server (/v1/completions): {p['counted_at_server']}; checks that "
              f"probed: {p['probing_checks']} of {p['idle_readings']} idle readings ({p['idle_verdicts']} said idle); "
              f"sent while busy: "
              f"{p['sent_while_busy']}; outside any check: {p['stray']} (in flight at the end: "
              f"{p.get('in_flight_at_end', 0)}); probing checks while a load request "
              f"arrived: {p['probing_checks_with_load_arriving']}",
              f"- tokens/s perfdata vs the server's counter over the same {t['intervals']} intervals: "
              f"{t['perf_tokens']:.0f} vs {t['server_tokens']:.0f} tokens ({_pct(t['aggregate'])}); per interval "
              f"median |dev| {_pct(t['median_dev'])}, p90 {_pct(t['p90_dev'])}, {t['within_5pct']} of "
              f"{t['compared']} within 5 %",
              f"- running+waiting perfdata vs the server's gauges: {g['perf_sum']:.0f} vs {g['server_sum']:.0f} "
              f"({_pct(g['aggregate_vs_server'])}), equal in {g['equal_to_server']} of {g['compared_to_server']}; "
              f"vs the load's requests in flight: {g['load_sum']:.0f} ({_pct(g['aggregate_vs_load'])}), equal in "
              f"{g['equal_to_load']} of {g['results']}",
              f"- generated tokens over {lt['spans']} quiet-to-quiet stretches: server {lt['server']:.0f}, the load "
              f"saw {lt['load_seen']:.0f} and asked at most {lt['load_asked']:.0f} (+{lt['probe_tokens_max']:.0f} "
              f"probe tokens)",
              f"- traffic: {res['traffic']['requests']} requests {res['traffic']['kinds']}, outcomes "
              f"{res['traffic']['outcomes']}; bursts {m.get('traffic', {}).get('bursts')}, gaps "
              f"{m.get('traffic', {}).get('gaps')}"]
    problems = [*res["problems"], *(x for w in res["windows"] for x in w["problems"]),
                *p["problems"], *t["problems"], *g["problems"], *lt["problems"]]
    lines += ["", "## Problems", "", *([f"- {x}" for x in problems] or ["- none"])]
    return "\n".join(lines)
