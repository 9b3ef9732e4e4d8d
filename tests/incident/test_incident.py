"""Issue 10: the incident, end to end on real parts, with the classic watchdog beside it.

One world for the whole module (conftest.py): a real vLLM 0.32 CPU server under a real supervisord,
watched by a real Icinga 2 running the shipped CheckCommand "vllm" and EventCommand "vllm-restart",
whose restart command is the operator's `supervisorctl -c CONF restart vllm`. Beside it the classic
watchdog (classic_watchdog.py: a chat request every 3 s, 5 s timeout, 3 failures in a row = "would
restart"), which only logs what it would do. The phases run in order, each asserted:

1. batch load: 4 long generations at a time for ~70 s: every check result OK busy, no inference
   request from the check (the server's own counters against the load's own count), no restart;
2. a real hang (SIGSTOP of VLLM::EngineCore under load): stalling, stuck, HARD CRITICAL, exactly one
   restart through supervisord although a second handler call runs by hand at the same time and
   another right after; starting while the model loads; OK again, and no second restart after;
3. a dead engine (SIGKILL of VLLM::EngineCore under load): down, one restart, OK again;
3b. an operator's `supervisorctl restart vllm`: stopping, starting, never restarted;
3c. a real hang in a scheduled downtime of the service: HARD CRITICAL stuck, the handler refuses in the
   downtime; when it ends, the restart service (`check_vllm_restart --status`) calls it: one restart;
4. the end: everything stops, nothing of vLLM survives.

Measured for the report: restarts per phase for both watchers, the time from the hang to the
restart and from the restart to OK, the requests lost.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.rig.icinga2 import schedule_downtime
from tests.rig.incident import (
    CHECK_INTERVAL,
    CHECK_VARS,
    COOLDOWN,
    HANDLER_VARS,
    LOAD_CLIENTS,
    LOAD_TOKENS,
    MAX_ATTEMPTS,
    RESTART_SERVICE,
    SERVICE,
    IncidentLoad,
    World,
    supervisor_status,
    tokens,
    verdict_of,
    wait,
    word_of,
)
from tests.rig.scripts import script
from tests.rig.vllm_server import Load, sample_sum, saturated

pytestmark = pytest.mark.incident

#: The batch: long enough for ~16 check results under saturation and three of the classic watchdog's restarts.
BATCH_SECONDS = 50
#: The maintenance window of phase 3c, from just before the hang: longer than the hang takes to HARD CRITICAL
#: (11 s in CI's runs), so the handler is called inside it.
DOWNTIME_SECONDS = 45
CHAT = [{"role": "user", "content": "are you alive?"}]  # what classic_watchdog.py sends
LOAD_PROMPT = inspect.signature(Load.__init__).parameters["prompt"].default


def completions(text: str, handler: str = "/v1/completions") -> float:
    return sample_sum(text, "http_requests_total", {"handler": handler}) or 0.0


def finished_length(text: str) -> float:
    return sample_sum(text, "vllm:request_success_total", {"finished_reason": "length"}) or 0.0


def words(results: list[dict]) -> list[str]:
    return [word_of(r["output"]) for r in results]


def phase_record(w: World, name: str, **kw) -> dict:
    rec = w.measured.setdefault("phases", {}).setdefault(name, {})
    rec.update(kw)
    return rec


def handler_by_hand(w: World) -> tuple[float, str]:
    """check_vllm_restart exactly as Icinga's EventCommand calls it for a CRITICAL HARD result."""
    argv = [script("check_vllm_restart"), "--state", "CRITICAL",
            "--state-type", "HARD", "--attempt", str(MAX_ATTEMPTS), "--url", w.sup.url,
            "--state-dir", str(w.state_dir), "--cooldown", str(HANDLER_VARS["vllm_restart_cooldown"]),
            "--max-per-hour", str(HANDLER_VARS["vllm_restart_max_per_hour"]),
            "--max-verdict-age", str(HANDLER_VARS["vllm_restart_max_verdict_age"]),
            "--command-timeout", str(HANDLER_VARS["vllm_restart_command_timeout"]),
            "--log", str(w.handler_log), "--", *w.restart_command]
    t = time.time()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    return t, (out.stdout.strip() or out.stderr.strip()) + f" [exit {out.returncode}]"


def saturate(w: World, load: IncidentLoad, since: float) -> float:
    """Wait for both slots taken and a queue, then for a busy check result of that load."""
    wait("saturation (running 2, waiting >= 1)", lambda: (t := w.metrics()) is not None and saturated(t), 120,
         diag=w.diag)
    t_sat = time.time()
    wait("a check result 'busy' under the load",
         lambda: any(word_of(r["output"]) == "busy" and r["at"] > t_sat for r in w.results(since)), 60,
         diag=w.diag)
    return t_sat


def first_ok_after(w: World, t: float, timeout: float) -> dict:
    return wait("the check OK again", lambda: next((r for r in w.results(t) if r["state"] == 0), None), timeout,
                diag=w.diag)


# --------------------------------------------------------------------------- 0. the boot


def _through_a_load(w: World, since: float, until: float) -> tuple[list[dict], list[str]]:
    """The check's results while a model loaded, and the handler's lines then: starting WARNING, never
    CRITICAL, never a restart (issue 17). The load ends at /health 200 as the harness saw it, or earlier at
    the first OK result: on a loaded machine Icinga 2's check can see the server answer before the harness's
    poll does (CI's run: an 'idle' OK 0.1 s before it), and an answer is the end of the load."""
    answered = [r["at"] for r in w.results(since, until) if r["state"] == 0]
    until = min([until, *answered])
    results = w.results(since, until)
    lines = [ln for ln in w.handler_lines() if since <= _line_time(ln) <= until + 5]
    return results, lines


def _after_it_served(results: list[dict]) -> list[dict]:
    """The results from the first one that no longer saw the server serve: a check that began before the
    SIGTERM took effect reads a serving server (OK), which is right, not part of the stop."""
    first = next((i for i, r in enumerate(results) if r["state"] != 0), len(results))
    return results[first:]


def _line_time(line: str) -> float:
    try:
        return time.mktime(time.strptime(line.split(" ", 1)[0][:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0


def test_0_boot_starting_through_the_load_never_restarted(world: World):
    w = world
    boot, health = w.measured["boot"]["boot"], w.measured["boot"]["health"]
    ok = first_ok_after(w, health, 120)
    results, lines = _through_a_load(w, boot, health)
    rec = phase_record(w, "boot", load_seconds=health - boot, checks=len(results),
                       verdicts=[verdict_of(r) for r in results], first_ok=ok["output"][:100],
                       first_ok_after_health=ok["at"] - health, handler=[ln.split(": ", 1)[-1][:80] for ln in lines])
    print(f"boot: {rec}")
    assert len(results) >= 3, rec  # the check ran through the load (several results, HARD before it ended)
    assert any(r["hard"] for r in results), rec
    assert all(r["state"] == 1 and word_of(r["output"]) == "starting" for r in results), rec["verdicts"]
    assert all("vLLM process" in r["output"] for r in results), [r["output"][:120] for r in results]
    assert w.restarts() == [] and w.history() == [], w.handler_lines()
    assert word_of(ok["output"]) in ("idle", "busy", "restarted"), ok["output"]


# --------------------------------------------------------------------------- 1. batch load


def test_1_batch_load_busy_never_restarted_no_inference_from_the_check(world: World):
    w = world
    url = w.sup.url
    wait("the first check result", w.last_result, 60, diag=w.diag)
    # Counter window: no check run may fall in it except while the load runs (then every result must
    # be busy, which sends nothing): checks pause around it. Idle results before it are probes.
    w.pause_checks()
    prompt_tokens_load = tokens(url, prompt=LOAD_PROMPT)
    prompt_tokens_chat = tokens(url, messages=CHAT, add_generation_prompt=True)
    pid0 = w.sup.pid()
    status0 = supervisor_status(w.sup)
    before = w.metrics()
    assert before is not None
    restarts0 = len(w.restarts())

    t_start = w.enter("batch")
    w.watchdog.start()
    load = IncidentLoad(url, LOAD_CLIENTS, LOAD_TOKENS)
    w.loads.append(load)
    wait("saturation (running 2, waiting >= 1)", lambda: (t := w.metrics()) is not None and saturated(t), 120,
         diag=w.diag)
    w.resume_checks()
    t_win0 = time.time()
    time.sleep(BATCH_SECONDS)
    w.pause_checks()
    t_win1 = time.time()
    w.enter("drain")
    assert load.drain(180), "the batch load did not finish its last generations"
    w.watchdog.stop()
    t_end = time.time()
    sent = sum(load.sent)
    # the server records a request once its response is sent: wait for the load's last ones
    wait("the server to count the load's requests",
         lambda: (t := w.metrics()) is not None and completions(t) - completions(before) >= sent, 30, diag=w.diag)
    time.sleep(1.5)
    after = w.metrics()
    assert after is not None
    w.resume_checks()
    w.enter("idle")

    results = w.results(t_win0, t_win1 + 1)
    probes = w.watchdog.between(t_start, t_end)
    wd_ok = sum(1 for p in probes if p["result"] == "HTTP 200 length")
    wd_fail = sum(1 for p in probes if not p["ok"])
    d_completions = completions(after) - completions(before)
    d_length = finished_length(after) - finished_length(before)
    d_prompt = (sample_sum(after, "vllm:prompt_tokens_total") or 0) - (sample_sum(before, "vllm:prompt_tokens_total") or 0)
    residual = d_prompt - prompt_tokens_load * sent
    rec = phase_record(
        w, "batch", seconds=t_end - t_start, checks=len(results),
        verdicts=sorted({verdict_of(r) for r in results}), ours=len(w.restarts()) - restarts0,
        classic=sum(1 for p in probes if p["would_restart"]), classic_probes=len(probes), classic_failed=wd_fail,
        lost=len(load.failures_between(t_start, t_end, "lost")), load_sent=sent, load_finished=sum(load.finished),
        server_completions=d_completions, server_length=d_length, server_prompt_tokens=d_prompt,
        prompt_tokens=(prompt_tokens_load, prompt_tokens_chat))
    print(f"batch: {rec}")

    # every check result while the load ran: OK busy
    assert len(results) >= BATCH_SECONDS / CHECK_INTERVAL * 0.6, (len(results), w.diag())
    bad = [(verdict_of(r), r["output"][:160]) for r in results if r["state"] != 0 or word_of(r["output"]) != "busy"]
    assert not bad, bad
    # the load ran unharmed and the server counted exactly its requests: the check sent none
    assert load.failures == [], load.failures[:5]
    assert sum(load.finished) == sent > 0, (load.finished, load.sent)
    assert d_completions == sent, f"/v1/completions: server counted {d_completions}, the load sent {sent}"
    assert completions(after, "/v1/chat/completions") - completions(before, "/v1/chat/completions") == len(probes)
    # finished at max_tokens: the load's generations, plus the watchdog's answered 1-token chats
    # (a chat the watchdog gave up on may still have finished on the server: at most wd_fail more)
    assert sum(load.finished) + wd_ok <= d_length <= sum(load.finished) + wd_ok + wd_fail, (d_length, rec)
    # prompt tokens: the load's prompts, plus whole chat prompts of the watchdog's probes the engine took
    assert residual >= 0 and residual % prompt_tokens_chat == 0 and residual / prompt_tokens_chat <= len(probes), rec
    # and nothing restarted
    assert w.restarts()[restarts0:] == [], w.restarts()
    assert w.history() == []
    assert w.sup.pid() == pid0
    status1 = supervisor_status(w.sup)
    assert status1.split("uptime")[0] == status0.split("uptime")[0] and "RUNNING" in status1, (status0, status1)
    assert f"pid {pid0}," in status1, status1


# --------------------------------------------------------------------------- 2. a real hang


def test_2_hang_stalling_stuck_one_restart_through_supervisord_then_ok(world: World):
    w = world
    sup = w.sup
    t_start = w.enter("load")
    load = IncidentLoad(sup.url, LOAD_CLIENTS, LOAD_TOKENS)  # runs on through the restart and phase 3
    w.loads.append(load)
    w.watchdog.start()
    saturate(w, load, t_start)
    pid_old = sup.pid()
    engine = sup.engine_core_pid()
    restarts0, hist0, sup0 = len(w.restarts()), len(w.history()), len(sup.log_lines())

    manual: dict[str, tuple[float, str]] = {}

    def concurrent_call() -> None:
        # a second handler call while Icinga's own is restarting (its history entry has no rc yet)
        try:
            wait("Icinga's restart in progress",
                 lambda: any(e.get("rc") is None for e in w.history()[hist0:]), 150, interval=0.1)
        except AssertionError:
            return
        manual["during"] = handler_by_hand(w)
        w.event("by hand, meanwhile: " + manual["during"][1].split(": ", 1)[-1][:110], manual["during"][0])

    caller = threading.Thread(target=concurrent_call, daemon=True)
    caller.start()
    t_hang = w.enter("hang")
    os.kill(engine, signal.SIGSTOP)
    w.event(f"SIGSTOP VLLM::EngineCore {engine} (API server {pid_old}), {LOAD_CLIENTS} generations in flight")
    try:
        wait("check_vllm_restart to restart the frozen server",
             lambda: len(w.restarts()) > restarts0 and len(w.history()) > hist0 and w.history()[-1].get("done"),
             180, diag=w.diag)
    finally:
        try:
            os.kill(engine, signal.SIGCONT)  # if supervisord's SIGKILL did not reach it, let it die
        except ProcessLookupError:
            pass
    entry = w.history()[-1]
    manual["after"] = handler_by_hand(w)  # right after the restart, the same call again
    w.event("by hand, again: " + manual["after"][1].split(": ", 1)[-1][:110], manual["after"][0])
    caller.join(60)
    pid_new = wait("supervisord's new vllm pid", lambda: (p := sup.pid()) and p != pid_old and p, 60, diag=w.diag)
    ok = first_ok_after(w, entry["done"], 240)
    t_ok = ok["at"]
    w.enter("after-hang")

    before_restart = w.results(t_hang, entry["at"])
    after_restart = w.results(entry["at"], t_ok + 0.01)
    sup_new = sup.log_lines()[sup0:]
    probes = w.watchdog.between(t_hang, t_ok)
    rec = phase_record(
        w, "hang", ours=len(w.restarts()) - restarts0, classic=sum(1 for p in probes if p["would_restart"]),
        hang_to_restart=entry["at"] - t_hang, hang_to_restart_done=entry["done"] - t_hang,
        restart_command_seconds=entry.get("seconds"), restart_to_ok=t_ok - entry["done"], hang_to_ok=t_ok - t_hang,
        lost=len(load.failures_between(t_hang, t_ok, "lost")),
        refused=len(load.failures_between(t_hang, t_ok, "refused")),
        lost_kinds=sorted({f[3][:60] for f in load.failures_between(t_hang, t_ok, "lost")}),
        verdicts_before=[verdict_of(r) for r in before_restart], verdicts_after=[verdict_of(r) for r in after_restart],
        first_ok=ok["output"][:120], manual={k: v[1] for k, v in manual.items()}, pids=(pid_old, pid_new))
    print(f"hang: {rec}")

    # the check: stalling, then stuck, HARD CRITICAL, before the restart
    ws = words(before_restart)
    first = next((i for i, x in enumerate(ws) if x != "busy"), None)
    assert first is not None and ws[first] == "stalling", rec["verdicts_before"]
    assert "stuck" in ws, rec["verdicts_before"]
    hard = [r for r in before_restart if r["state"] == 2 and r["hard"]]
    assert hard and word_of(hard[-1]["output"]) == "stuck", rec["verdicts_before"]
    assert all(x in ("busy", "stalling", "stuck") for x in ws), rec["verdicts_before"]
    # exactly one restart, by the handler, through supervisord
    new_restarts = w.restarts()[restarts0:]
    assert len(new_restarts) == 1 and "restarted: verdict 'stuck'" in new_restarts[0], w.handler_lines()
    assert "ran /usr/bin/supervisorctl" in new_restarts[0], new_restarts
    # before it, the post-mortem of the hang (issue 48): the evidence, the last page, the frozen EngineCore's stacks
    assert "; post-mortem in " in new_restarts[0], new_restarts
    bundle = Path(new_restarts[0].split("; post-mortem in ", 1)[1].split(" (", 1)[0])
    assert json.loads((bundle / "evidence.json").read_text())["verdict"]["word"] == "stuck"
    assert "vllm:" in (bundle / "metrics.txt").read_text()
    assert "vllm/v1/engine/core.py" in (bundle / f"py-spy-{engine}.txt").read_text()
    took = json.loads((bundle / "collection.json").read_text())["took"]
    phase_record(w, "hang", post_mortem=str(bundle), post_mortem_seconds=took)
    assert took < 20, took
    assert len(w.history()) == hist0 + 1 and entry["rc"] == 0 and entry["verdict"] == "stuck", w.history()
    assert any("stopped: vllm" in ln for ln in sup_new), sup_new
    spawned = [ln for ln in sup_new if "spawned: 'vllm'" in ln]
    assert len(spawned) == 1 and f"with pid {pid_new}" in spawned[0], sup_new
    # the repeated and the concurrent call: refused, by the lock or because the verdict predates the restart
    assert "during" in manual, "the concurrent handler call never ran (Icinga's restart was not seen in progress)"
    for k, (_, line) in manual.items():
        assert ": restarted:" not in line and ("no restart" in line or "restart refused" in line), (k, line)
    assert "lock" in manual["during"][1] or "before the last restart" in manual["during"][1], manual
    # what the check said after: stopping while supervisord stops the frozen process (it served, and its
    # listener closes first), starting while the model loads, then a good word
    wa = words(after_restart)
    assert "starting" in wa, rec["verdicts_after"]
    assert word_of(ok["output"]) in ("restarted", "idle", "busy"), ok["output"]
    assert all(x in ("stuck", "stopping", "starting", "restarted", "idle", "busy") for x in wa), rec["verdicts_after"]
    # the requests in flight at the hang did not survive it
    assert rec["lost"] >= 1, load.failures

    # the restarted server stays OK and is not restarted again (the load goes on)
    wait("a busy result of the restarted server", lambda: any(word_of(r["output"]) == "busy" for r in w.results(t_ok)),
         90, diag=w.diag)
    settle = entry["done"] + CHECK_VARS["vllm_start_grace"] + 2  # see test_3: a kill inside the grace reads "starting"
    time.sleep(max(0.0, settle - time.time()))
    later = w.results(t_ok)
    assert all(r["state"] == 0 for r in later), [(verdict_of(r), r["output"][:100]) for r in later if r["state"]]
    assert len(w.restarts()) == restarts0 + 1, w.restarts()
    phase_record(w, "hang", ok_after=len(later), ok_after_seconds=time.time() - t_ok)


# --------------------------------------------------------------------------- 3. a dead engine


def test_3_dead_engine_down_one_restart_recovered(world: World):
    w = world
    sup = w.sup
    load = w.loads[-1]
    t_start = time.time()
    last = w.history()[-1] if w.history() else None
    # The check reads down as "starting" for --start-grace after a restart (it does not look at
    # whether the new process already served): phase 2 waited that out; the cooldown is shorter.
    assert last is None or time.time() - last["done"] > max(COOLDOWN, CHECK_VARS["vllm_start_grace"]), last
    saturate(w, load, t_start)
    pid_old = sup.pid()
    engine = sup.engine_core_pid()
    restarts0, hist0, sup0 = len(w.restarts()), len(w.history()), len(sup.log_lines())
    t_kill = w.enter("dead")
    os.kill(engine, signal.SIGKILL)
    w.event(f"SIGKILL VLLM::EngineCore {engine} (API server {pid_old}), {LOAD_CLIENTS} generations in flight")
    wait("check_vllm_restart to restart the dead server",
         lambda: len(w.restarts()) > restarts0 and len(w.history()) > hist0 and w.history()[-1].get("done"),
         180, diag=w.diag)
    entry = w.history()[-1]
    pid_new = wait("supervisord's new vllm pid", lambda: (p := sup.pid()) and p != pid_old and p, 60, diag=w.diag)
    ok = first_ok_after(w, entry["done"], 240)
    t_ok = ok["at"]
    wait("a busy result of the restarted server", lambda: any(word_of(r["output"]) == "busy" for r in w.results(t_ok)),
         90, diag=w.diag)
    w.enter("after-dead")
    time.sleep(2 * CHECK_INTERVAL)

    before_restart = w.results(t_kill, entry["at"])
    after_restart = w.results(entry["at"], t_ok + 0.01)
    sup_new = sup.log_lines()[sup0:]
    probes = w.watchdog.between(t_kill, t_ok)
    downs = [r["output"][:140] for r in before_restart if word_of(r["output"]) == "down"]
    rec = phase_record(
        w, "dead", ours=len(w.restarts()) - restarts0, classic=sum(1 for p in probes if p["would_restart"]),
        hang_to_restart=entry["at"] - t_kill, hang_to_restart_done=entry["done"] - t_kill,
        restart_command_seconds=entry.get("seconds"), restart_to_ok=t_ok - entry["done"], hang_to_ok=t_ok - t_kill,
        lost=len(load.failures_between(t_kill, t_ok, "lost")),
        refused=len(load.failures_between(t_kill, t_ok, "refused")),
        lost_kinds=sorted({f[3][:60] for f in load.failures_between(t_kill, t_ok, "lost")}),
        verdicts_before=[verdict_of(r) for r in before_restart], verdicts_after=[verdict_of(r) for r in after_restart],
        down_outputs=downs[:3], first_ok=ok["output"][:120], pids=(pid_old, pid_new),
        supervisord=[ln.split(" ", 2)[-1] for ln in sup_new if "vllm" in ln])
    print(f"dead: {rec}")

    hard = [r for r in before_restart if r["state"] == 2 and r["hard"]]
    assert hard and word_of(hard[-1]["output"]) == "down", rec["verdicts_before"]
    # (stopping: the API server, its engine dead, closing its listener in the seconds before it exits)
    assert all(x in ("busy", "stalling", "unresponsive", "stopping", "down") for x in words(before_restart)), \
        rec["verdicts_before"]
    new_restarts = w.restarts()[restarts0:]
    assert len(new_restarts) == 1 and "restarted: verdict 'down'" in new_restarts[0], w.handler_lines()
    assert entry["rc"] == 0 and entry["verdict"] == "down", entry
    # the API server exits by itself 2-5 s after its engine (supervisord: "exited", and no autorestart);
    # when the handler came first, supervisord stopped what was left ("stopped")
    assert any("exited: vllm" in ln or "stopped: vllm" in ln for ln in sup_new), sup_new
    spawned = [ln for ln in sup_new if "spawned: 'vllm'" in ln]
    assert len(spawned) == 1 and f"with pid {pid_new}" in spawned[0], sup_new
    assert "starting" in words(after_restart), rec["verdicts_after"]
    assert word_of(ok["output"]) in ("restarted", "idle", "busy"), ok["output"]
    assert rec["lost"] >= 1, load.failures
    assert all(r["state"] == 0 for r in w.results(t_ok)), [verdict_of(r) for r in w.results(t_ok)]


# --------------------------------------------------------------------------- 3b. an operator's restart


def test_3b_operator_restart_is_starting_never_restarted(world: World):
    w = world
    sup = w.sup
    last = w.history()[-1]
    # past the cooldown and the marker's grace: only the host's process can say "starting" now, and a
    # HARD CRITICAL would be restarted at once
    settle = last["done"] + max(COOLDOWN, CHECK_VARS["vllm_start_grace"]) + 2
    time.sleep(max(0.0, settle - time.time()))
    restarts0, pid_old = len(w.restarts()), sup.pid()
    t_restart = w.enter("operator-restart")
    w.event("an operator runs `supervisorctl restart vllm` (not the handler)")
    done = sup.ctl("restart", "vllm", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    health = sup.wait_healthy(240)
    t_health = time.time()
    w.event("vLLM answers /health 200 again", t_health)
    ok = first_ok_after(w, t_health, 120)
    w.enter("after-operator-restart")
    spawned = [at for at, text in w.supervisord_events() if at >= t_restart - 1 and "spawned: 'vllm'" in text]
    assert spawned, w.supervisord_events()[-5:]
    # from the new process's spawn to its first answer: the load; before it, the old process was stopping
    # (it served, closed its listener on SIGTERM and took a while to exit: "stopping", never a HARD down)
    results, lines = _through_a_load(w, spawned[0] + 1, t_health)
    stopping = _after_it_served(w.results(t_restart, spawned[0] + 1))
    rec = phase_record(w, "operator restart", load_seconds=t_health - spawned[0], checks=len(results),
                       while_stopping=[verdict_of(r) for r in stopping],
                       verdicts=[verdict_of(r) for r in results], first_ok=ok["output"][:100],
                       ours=len(w.restarts()) - restarts0, pids=(pid_old, sup.pid()), health=health)
    print(f"operator restart: {rec}")
    assert len(results) >= 3 and any(r["hard"] for r in results), rec
    assert all(r["state"] == 1 and word_of(r["output"]) == "starting" for r in results), rec["verdicts"]
    # between the old process's exit and the new one's spawn nothing lives: the stop goes on, never a down
    assert all(word_of(r["output"]) in ("stopping", "starting") and r["state"] == 1 for r in stopping), \
        rec["while_stopping"]
    assert len(w.restarts()) == restarts0, w.handler_lines()
    assert sup.pid() != pid_old


# --------------------------------------------------------------------------- 4. the end


def test_3c_a_hang_in_a_downtime_is_left_alone_then_restarted_once_after_it(world: World):
    """Icinga 2 calls the handler on the HARD change, inside the downtime: it refuses and says why. The main
    service stays HARD CRITICAL, so nothing calls it again when the downtime ends; the restart service's
    state does (held back -> due), and its handler restarts once."""
    w = world
    sup = w.sup
    load = w.loads[-1]
    last = w.history()[-1]
    time.sleep(max(0.0, last["done"] + COOLDOWN + 2 - time.time()))  # out of the kill's cooldown
    saturate(w, load, time.time())
    pid_old, engine = sup.pid(), sup.engine_core_pid()
    restarts0, hist0, lines0 = len(w.restarts()), len(w.history()), len(w.handler_lines())
    t_down = w.enter("downtime")
    end = schedule_downtime(w.icinga, SERVICE, DOWNTIME_SECONDS)
    w.event(f"an operator schedules a {DOWNTIME_SECONDS} s downtime of the service (Icinga 2 API)", t_down)
    os.kill(engine, signal.SIGSTOP)
    w.event(f"SIGSTOP VLLM::EngineCore {engine} (API server {pid_old}) in the downtime")
    held = "but the service is in a scheduled downtime"
    try:
        wait("the handler's refusal in the downtime", lambda: any(held in ln for ln in w.handler_lines()[lines0:]),
             DOWNTIME_SECONDS, diag=w.diag)
        wait("the restart after the downtime",
             lambda: len(w.restarts()) > restarts0 and len(w.history()) > hist0 and w.history()[-1].get("done"),
             max(end - time.time(), 0) + 120, diag=w.diag)
    finally:
        try:
            os.kill(engine, signal.SIGCONT)
        except ProcessLookupError:
            pass
    entry = w.history()[-1]
    ok = first_ok_after(w, entry["done"], 240)
    w.enter("after-downtime")
    in_window = w.results(t_down, end)
    status = [r["output"] for r in w.icinga.results_of(RESTART_SERVICE) if t_down <= r["at"] <= entry["at"] + 1]
    rec = phase_record(w, "downtime", ours=len(w.restarts()) - restarts0, downtime=DOWNTIME_SECONDS,
                       restart_after_downtime_end=entry["at"] - end, restart_to_ok=ok["at"] - entry["done"],
                       verdicts_in_downtime=[verdict_of(r) for r in in_window],
                       restart_service=sorted({o.split(":", 1)[0] for o in status}), first_ok=ok["output"][:100])
    print(f"downtime: {rec}")
    assert any(r["state"] == 2 and r["hard"] and word_of(r["output"]) == "stuck" for r in in_window), \
        rec["verdicts_in_downtime"]
    assert entry["at"] >= end - 1 and entry["verdict"] == "stuck" and entry["rc"] == 0, (entry, end)
    new_restarts = w.restarts()[restarts0:]
    assert len(new_restarts) == 1 and "restarted: verdict 'stuck'" in new_restarts[0], w.handler_lines()
    assert any(o.startswith("VLLM_RESTART WARNING - held back: ") and "downtime" in o for o in status), status
    assert sup.pid() != pid_old
    assert word_of(ok["output"]) in ("restarted", "idle", "busy"), ok["output"]


def test_4_everything_stops_and_nothing_of_vllm_survives(world: World):
    w = world
    w.enter("end")
    total = len(w.restarts())
    for load in w.loads:
        load.stop()
    w.watchdog.stop()
    time.sleep(1.5)
    w.stop_sampler()
    assert total == 3, w.handler_lines()  # the hang, the kill, the hang after the downtime
    assert not any("circuit breaker open" in ln for ln in w.handler_lines()), w.handler_lines()
    w.icinga.stop()
    killed = w.sup.stop()
    w.measured["killed by hand at the end"] = killed
    assert killed == [], f"vLLM processes outlived supervisord's stop (killasgroup): {killed}"
    assert w.sup.survivors() == []
