"""The incident tier's machinery: the supervised real vLLM, the real Icinga 2, the load, the classic
watchdog beside our check, a once-a-second sampler, and the timeline table a person reads.

Imported by conftest.py (the session fixture) and test_incident.py (the phases).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xmlrpc.client
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.rig.icinga2 import HOST, Icinga2
from tests.rig.monitoring import icinga_value, tail
from tests.rig.scripts import script
from tests.rig.supervisor import Supervisord, _UnixTransport
from tests.rig.vllm_server import SERVED_MODEL_NAME, Load, sample_sum
from tests.rig.waiting import wait_for

HERE = Path(__file__).resolve().parent
SERVICE = "vllm"

# --------------------------------------------------------------------------- the scaled-down settings

CHECK_INTERVAL, RETRY_INTERVAL, MAX_ATTEMPTS = 3, 2, 3
#: The check's options as Icinga custom variables: production defaults scaled down ~15x in time.
CHECK_VARS = {
    "vllm_stuck_readings": 2,
    "vllm_stuck_seconds": 8,      # 120 in production
    "vllm_min_gap": 1,
    "vllm_reread_delay": 1,
    "vllm_probe_timeout": 5,
    "vllm_start_grace": 75,      # 900: longer than the model takes to load after the restart (here 15-50 s)
    "vllm_timeout": 20,
}
COOLDOWN = 60                    # 900 in production
HANDLER_VARS = {
    "vllm_restart_cooldown": COOLDOWN,
    "vllm_restart_max_per_hour": 3,
    "vllm_restart_max_verdict_age": 30,
    "vllm_restart_command_timeout": 120,
}
#: The classic watchdog: a chat request every WATCH_INTERVAL s, WATCH_TIMEOUT s timeout, N in a row.
WATCH_INTERVAL, WATCH_TIMEOUT, WATCH_FAILURES = 3.0, 5.0, 3
#: The batch load: LOAD_CLIENTS concurrent generations of LOAD_TOKENS tokens each (--max-num-seqs 2).
LOAD_CLIENTS, LOAD_TOKENS = 4, 2000


def service_conf(url: str, state_dir: Path, restart: list[str], log: Path, check_vars: dict = CHECK_VARS,
                 handler_vars: dict = HANDLER_VARS, timing: tuple[float, float, int, float] | None = None) -> str:
    """The main service: the shipped CheckCommand and EventCommand with these settings. `timing`: check and
    retry interval, max_check_attempts, check timeout (the incident's scaled-down ones when None)."""
    every, retry, attempts, timeout = timing or (CHECK_INTERVAL, RETRY_INTERVAL, MAX_ATTEMPTS, 30)
    vars_ = {"vllm_url": url, "vllm_state_dir": str(state_dir), **check_vars, **handler_vars,
             "vllm_restart_command": restart, "vllm_restart_log": str(log)}
    body = "\n".join(f"  vars.{k} = {icinga_value(v)}" for k, v in vars_.items())
    return f"""
object Service "{SERVICE}" {{
  host_name = "{HOST}"
  check_command = "vllm"
  event_command = "vllm-restart"
  check_interval = {every:g}s
  retry_interval = {retry:g}s
  max_check_attempts = {attempts}
  check_timeout = {timeout:g}s
{body}
}}
"""


RESTART_SERVICE = "vllm-restart"


def restart_service_conf(url: str, state_dir: Path, restart: list[str], log: Path) -> str:
    """The restart service beside the main one, as the docs ship it: `check_vllm_restart --status` on the
    same files, the same EventCommand, HARD at once. Its state changes when a restart becomes due (a
    downtime over, a cooldown ended), so the handler is called then, whatever the main service's history."""
    text = service_conf(url, state_dir, restart, log)
    return (text.replace(f'object Service "{SERVICE}"', f'object Service "{RESTART_SERVICE}"')
            .replace('check_command = "vllm"', 'check_command = "vllm-restart-status"')
            .replace(f"max_check_attempts = {MAX_ATTEMPTS}", "max_check_attempts = 1"))


def plugin_dir(root: Path) -> Path:
    """PluginContribDir as an operator fills it: the two installed console scripts, nothing wrapped."""
    d = root / "plugins"
    d.mkdir()
    for name in ("check_vllm", "check_vllm_restart"):
        (d / name).symlink_to(script(name))
    return d


# --------------------------------------------------------------------------- Icinga 2 with timestamps


class IcingaWithTimes(Icinga2):
    """tests/monitoring's Icinga2, whose results also keep when each check started and ended (Icinga's own
    clock), its state type and attempt, and its perfdata (the soak compares it with the server's counters)."""

    def result(self, ev: dict) -> dict:
        cr = ev.get("check_result", {})
        after = cr.get("vars_after") or {}
        start = cr.get("execution_start")
        return {**super().result(ev), "at": _ended(cr),
                "start": float(start) if isinstance(start, (int, float)) and start > 0 else None,
                "hard": after.get("state_type") == 1, "attempt": after.get("attempt"),
                "perf": perf_values(cr.get("performance_data") or [])}

    def set_active_checks(self, enabled: bool) -> None:
        resp = self.client.post(f"/v1/objects/services/{HOST}!{SERVICE}",
                                json={"attrs": {"enable_active_checks": enabled}})
        resp.raise_for_status()


def _ended(cr: dict) -> float:
    """When the check ended, by Icinga's own clock: the event stream may deliver a result after the event
    handler it triggered has already started a restart, so arrival time would misorder the two."""
    end = cr.get("execution_end")
    return float(end) if isinstance(end, (int, float)) and end > 0 else time.time()


def perf_values(items: list) -> dict[str, float]:
    """Icinga 2's performance_data strings ("label=1.5s;;;0") as label -> number; U and the unparsable
    are left out."""
    out = {}
    for item in items:
        text = item if isinstance(item, str) else ""
        label, _, rest = text.partition("=")
        value = rest.split(";", 1)[0].rstrip("s%")
        try:
            out[label.strip("'")] = float(value)
        except ValueError:
            pass
    return out


STATE_NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


def word_of(output: str) -> str:
    """'VLLM OK - busy: 2 running' -> 'busy'; 'VLLM CRITICAL - down: connection refused' -> 'down'."""
    text = output.split(" - ", 1)[1] if " - " in output else output
    for w in ("no metrics",):
        if text.startswith(w):
            return w
    return text.split(":", 1)[0].split(" ", 1)[0].strip()


def verdict_of(result: dict | None) -> str:
    if not result:
        return "-"
    state = STATE_NAMES[int(result["state"])] if result.get("state") is not None else "?"
    kind = "HARD" if result.get("hard") else f"SOFT {result.get('attempt')}/{MAX_ATTEMPTS}"
    return f"{state} {kind} {word_of(result['output'])}"


# --------------------------------------------------------------------------- the load


class IncidentLoad(Load):
    """tests/real_vllm's load generator, made to go on through a restart: each client sends one long
    generation after another and, when one fails, records why and sends the next (every 2 s while
    nothing listens). It counts what it sent, so the server's own counters can be compared with it.

    A failure is `lost` when the request reached the server and died there (an HTTP 5xx, a reset or
    a stream cut before [DONE]) and `refused` when nothing listened (the server was down)."""

    def __init__(self, base_url: str, n: int, max_tokens: int) -> None:
        self.sent = [0] * n
        self.failures: list[tuple[float, int, str, str]] = []  # (time, client, lost|refused, detail)
        super().__init__(base_url, n, max_tokens, ignore_eos=True, model=SERVED_MODEL_NAME, repeat=True,
                         timeout=600.0)

    def _run(self, i: int) -> None:
        body = {"model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens,
                "temperature": 0.0, "ignore_eos": self.ignore_eos, "stream": True}
        while not self._stop.is_set() and self.repeat:
            try:
                with httpx.Client(base_url=self.base_url,
                                  timeout=httpx.Timeout(self.timeout, connect=10.0)) as c:
                    while not self._stop.is_set() and self.repeat:
                        done = self.finished[i]
                        self.sent[i] += 1
                        ok = self._one(c, i, body)
                        if self._stop.is_set():
                            return
                        if not ok or self.finished[i] == done:
                            self._fail(i, "lost", self.errors[i] or "stream ended without [DONE]")
                            self.errors[i] = None
                            time.sleep(1.0)
            except httpx.ConnectError as exc:
                self.sent[i] -= 1  # it never reached a server
                if not self._stop.is_set():
                    self._fail(i, "refused", f"{type(exc).__name__}: {exc}")
                    self._stop.wait(2.0)
            except Exception as exc:  # noqa: BLE001 - recorded, and the client goes on
                if not self._stop.is_set():
                    self._fail(i, "lost", f"{type(exc).__name__}: {exc}")
                    self._stop.wait(1.0)

    def _fail(self, i: int, kind: str, detail: str) -> None:
        with self._lock:
            self.failures.append((time.time(), i, kind, detail[:200]))

    def failures_between(self, t0: float, t1: float, kind: str) -> list[tuple[float, int, str, str]]:
        return [f for f in list(self.failures) if t0 <= f[0] < t1 and f[2] == kind]

    def drain(self, timeout: float = 90.0) -> bool:
        """Send no new generation; let the ones in flight finish."""
        self.repeat = False
        return self.join(timeout)


# --------------------------------------------------------------------------- the classic watchdog


class Watchdog:
    """tests/rig/classic_watchdog.py as its own process, logging one JSON line per probe."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "classic_watchdog.py"), "--url", self.url, "--model", SERVED_MODEL_NAME,
             "--interval", str(WATCH_INTERVAL), "--timeout", str(WATCH_TIMEOUT), "--failures", str(WATCH_FAILURES),
             "--log", str(self.log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # it ends after the probe in flight (<= its timeout)
            try:
                self.proc.wait(WATCH_TIMEOUT + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def probes(self) -> list[dict]:
        try:
            lines = self.log.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for ln in lines:
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass  # a line being written
        return out

    def between(self, t0: float, t1: float) -> list[dict]:
        return [p for p in self.probes() if t0 <= p["at"] < t1]


def watch_verdict(p: dict | None) -> str:
    if p is None:
        return "-"
    if p["would_restart"]:
        return f"WOULD RESTART ({p['result']})"
    if p["ok"]:
        return f"ok {p['seconds']:.1f}s"
    return f"fail {p['result']} ({p['consecutive']} in a row)"


# --------------------------------------------------------------------------- the world and its sampler


@dataclass
class Sample:
    at: float
    phase: str
    check: str
    watch: str
    ours: int
    classic: int
    pid: int
    running: str


@dataclass
class World:
    root: Path
    sup: Supervisord
    icinga: IcingaWithTimes
    state_dir: Path
    handler_log: Path
    watchdog: Watchdog
    restart_command: list[str]
    t0: float = field(default_factory=time.time)
    phase: str = "start"
    phases: list[tuple[float, str]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    measured: dict = field(default_factory=dict)
    loads: list[IncidentLoad] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    paused: bool = False
    paused_spans: list[list[float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    # -- phases
    def enter(self, phase: str) -> float:
        now = time.time()
        self.phase = phase
        self.phases.append((now, phase))
        print(f"{time.strftime('%T')} +{now - self.t0:5.1f}s --- phase {phase}", flush=True)
        return now

    def event(self, text: str, at: float | None = None) -> float:
        """Something the test did (or saw) that the timeline shows as its own row."""
        at = time.time() if at is None else at
        self.events.append((at, text))
        print(f"{time.strftime('%T')} +{at - self.t0:5.1f}s >>> {text}", flush=True)
        return at

    def phase_spans(self) -> list[tuple[str, float, float]]:
        ends = [t for t, _ in self.phases[1:]] + [self.samples[-1].at if self.samples else time.time()]
        return [(name, t, end) for (t, name), end in zip(self.phases, ends, strict=True)]

    # -- what the parts say
    def results(self, since: float = 0.0, until: float = float("inf")) -> list[dict]:
        return [r for r in self.icinga.results_of(SERVICE) if since <= r["at"] < until]

    def last_result(self) -> dict | None:
        rs = self.icinga.results_of(SERVICE)
        return rs[-1] if rs else None

    def handler_lines(self) -> list[str]:
        try:
            return self.handler_log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def restarts(self) -> list[str]:
        return [ln for ln in self.handler_lines() if ": restarted: " in ln]

    def history(self) -> list[dict]:
        files = list(self.state_dir.glob("*.restart-history.json"))
        if not files:
            return []
        try:
            doc = json.loads(files[0].read_text())
        except (OSError, ValueError):
            return []  # being replaced (it is written atomically, but read twice here)
        return (doc.get("data") or {}).get("restarts", [])

    def metrics(self, timeout: float = 5.0) -> str | None:
        try:
            r = httpx.get(self.sup.url + "/metrics", timeout=timeout)
            return r.text if r.status_code == 200 else None
        except httpx.HTTPError:
            return None

    def checks_running(self) -> list[int]:
        """check_vllm processes Icinga is running on our state dir right now."""
        out = []
        for e in os.listdir("/proc"):
            if e.isdigit():
                try:
                    cmd = Path(f"/proc/{e}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"/check_vllm\0" in cmd and str(self.state_dir).encode() in cmd:
                    out.append(int(e))
        return out

    def pause_checks(self) -> None:
        """No new check run, and none in flight (so nothing the check does falls into a counter window)."""
        self.icinga.set_active_checks(False)
        self.paused = True
        self.paused_spans.append([time.time(), float("inf")])
        wait("no check_vllm run in flight", lambda: not self.checks_running(), 40, interval=0.2)
        time.sleep(0.5)

    def resume_checks(self) -> None:
        self.icinga.set_active_checks(True)
        self.paused = False
        if self.paused_spans:
            self.paused_spans[-1][1] = time.time()
        self.icinga.force_check(SERVICE)

    def diag(self) -> str:
        return ("--- handler log\n" + "\n".join(self.handler_lines()[-15:])
                + f"\n--- supervisord.log\n{tail(self.sup.log, 15)}\n--- vllm.log\n{tail(self.sup.vllm_log, 15)}"
                + f"\n--- icinga\n{self.icinga.diag()}\n--- last results\n"
                + "\n".join(f"{r['at'] - self.t0:7.1f} {verdict_of(r)}: {r['output'][:140]}"
                            for r in self.results()[-12:]))

    # -- the sampler: once a second, what every part says (for the timeline)
    def start_sampler(self) -> None:
        threading.Thread(target=self._sample_loop, daemon=True, name="incident-sampler").start()

    def stop_sampler(self) -> None:
        self._stop.set()

    def _sample_loop(self) -> None:
        rpc = xmlrpc.client.ServerProxy("http://localhost", transport=_UnixTransport(str(self.sup.sock), 2.0))
        names = "&".join(f"name[]={n}" for n in ("vllm:num_requests_running", "vllm:num_requests_waiting"))
        with httpx.Client(timeout=2.0) as c:
            while not self._stop.is_set():
                t = time.time()
                try:
                    r = c.get(f"{self.sup.url}/metrics/?{names}")
                    if r.status_code == 200:
                        run = sample_sum(r.text, "vllm:num_requests_running")
                        wai = sample_sum(r.text, "vllm:num_requests_waiting")
                        running = f"{run:g}/{wai:g}" if run is not None and wai is not None else "?"
                    else:
                        running = f"HTTP {r.status_code}"
                except httpx.HTTPError:
                    running = "-"
                try:
                    info = rpc.supervisor.getProcessInfo("vllm")
                    pid = int(info["pid"])
                except (OSError, xmlrpc.client.Error):
                    pid = -1
                probes = self.watchdog.probes()
                self.samples.append(Sample(
                    at=t, phase=self.phase,
                    check=verdict_of(self.last_result()) + (" (paused)" if self.paused else ""),
                    watch=watch_verdict(probes[-1] if probes else None), ours=len(self.history()),
                    classic=sum(1 for p in probes if p["would_restart"]), pid=pid, running=running))
                self._stop.wait(max(0.0, 1.0 - (time.time() - t)))

    # -- the table a person reads
    def supervisord_events(self) -> list[tuple[float, str]]:
        out = []
        for ln in self.sup.log_lines():
            if "vllm" not in ln or "waiting for vllm" in ln or "Included extra file" in ln:
                continue
            try:
                at = time.mktime(time.strptime(ln[:19], "%Y-%m-%d %H:%M:%S")) + int(ln[20:23]) / 1000
            except ValueError:
                continue
            text = ln[24:].split(" ", 1)[-1]
            out.append((at, "supervisord: " + text.split(", process has stayed up")[0]))
        return out

    def handler_events(self) -> list[tuple[float, str]]:
        out = []
        for e in self.history():
            out.append((e["at"], f"check_vllm_restart: verdict {e.get('verdict')!r}: runs {e.get('command')} "
                                 "restart vllm"))
            if e.get("done"):
                out.append((e["done"], f"check_vllm_restart: {e.get('command')} exited {e.get('rc')} "
                                       f"after {e.get('seconds', 0):.0f} s: 'restarted'"))
        return out

    def timeline(self) -> str:
        head = (f"{'time':>6}  {'phase':<10} {'check_vllm in Icinga 2':<28} {'classic watchdog':<34} "
                f"{'restarts':>8} {'would':>5}  {'vllm pid':>8}  {'run/wait':<8}")
        rows: list[tuple[float, str]] = []
        prev = None
        for s in self.samples:
            key = (s.phase, s.check, s.watch.split(" ", 1)[0], s.ours, s.classic, s.pid)
            if key == prev:
                continue
            prev = key
            rows.append((s.at, f"{s.at - self.t0:6.0f}  {s.phase:<10} {s.check:<28} {s.watch[:34]:<34} "
                               f"{s.ours:>8} {s.classic:>5}  {s.pid if s.pid > 0 else '-':>8}  {s.running:<8}"))
        for at, text in [*self.events, *self.supervisord_events(), *self.handler_events()]:
            rows.append((at, f"{at - self.t0:6.0f}  {'':<10} >>> {text}"))
        rows.sort(key=lambda r: r[0])
        return "\n".join([head, "-" * len(head), *(r for _, r in rows),
                          "(time: seconds since supervisord started; a row whenever the phase, the check's verdict, the "
                          "watchdog's result, a count or the pid changed; >>> what happened; restarts: "
                          "check_vllm_restart's; would: the classic watchdog's \"would restart\"; run/wait: "
                          "vllm:num_requests_running/waiting, - when /metrics did not answer)"])


def wait(what: str, predicate: Callable[[], object], timeout: float, interval: float = 0.5,
         diag: Callable[[], str] = lambda: ""):
    """tests/rig/waiting.py's, polling every half second (the rig's parts are slow to change)."""
    return wait_for(what, predicate, timeout, interval, diag)


def supervisor_status(sup: Supervisord) -> str:
    return sup.ctl("status", "vllm", timeout=30).stdout.strip()


def tokens(url: str, **body) -> int:
    """Prompt length the server computes (POST /tokenize: no engine request, no counter moves)."""
    r = httpx.post(url + "/tokenize", json={"model": SERVED_MODEL_NAME, **body}, timeout=10)
    r.raise_for_status()
    return int(r.json()["count"])


# --------------------------------------------------------------------------- the report


def _s(x) -> str:
    return "-" if x is None else f"{x:.0f} s" if isinstance(x, float) else str(x)


def summary(w: World, versions: dict) -> str:
    ph = w.measured.get("phases", {})
    head = (f"{'phase':<7} {'check results':<30} {'restarts':>8} {'classic':>7}  {'fault->restart':>14} "
            f"{'restart cmd':>11} {'restart->OK':>11} {'fault->OK':>9} {'requests lost':>13} {'refused':>7}")
    rows = [head, "-" * len(head)]
    for name in ("batch", "hang", "dead"):
        p = ph.get(name)
        if not p:
            rows.append(f"{name:<7} (did not run)")
            continue
        checks = (f"{p.get('checks')} x {', '.join(p.get('verdicts', []))}" if name == "batch"
                  else " > ".join(dict.fromkeys(x.split()[-1] for x in p.get("verdicts_before", [])
                                               + p.get("verdicts_after", []))))
        rows.append(f"{name:<7} {checks[:30]:<30} {p.get('ours', '-')!s:>8} {p.get('classic', '-')!s:>7}  "
                    f"{_s(p.get('hang_to_restart')):>14} {_s(p.get('restart_command_seconds')):>11} "
                    f"{_s(p.get('restart_to_ok')):>11} {_s(p.get('hang_to_ok')):>9} {p.get('lost', '-')!s:>13} "
                    f"{p.get('refused', '-')!s:>7}")
    rows.append("(restarts: check_vllm_restart's, through supervisord; classic: the classic watchdog's \"would "
                "restart\" over the same time; fault: the SIGSTOP / SIGKILL; restart cmd: supervisorctl restart's "
                "run time; requests lost: load requests in flight that failed; refused: load connection attempts "
                "while nothing listened)")
    rows += ["", f"{'every phase':<11} {'from':>6} {'to':>6}  {'restarts':>8} {'classic':>7}  check verdicts"]
    results = w.results()
    history = w.history()
    probes = w.watchdog.probes()
    for name, t0, t1 in w.phase_spans():
        verdicts = [verdict_of(r).split()[-1] for r in results if t0 <= r["at"] < t1]
        paused = any(a < t1 and t0 < b for a, b in w.paused_spans)
        if not verdicts and t1 - t0 < 2:
            continue  # a phase that only handed over to the next
        rows.append(f"{name:<11} {t0 - w.t0:6.0f} {t1 - w.t0:6.0f}  "
                    f"{sum(1 for e in history if t0 <= e['at'] < t1):>8} "
                    f"{sum(1 for p in probes if p['would_restart'] and t0 <= p['at'] < t1):>7}  "
                    f"{', '.join(_dedup(verdicts))[:110]}{' (checks paused: closing the counter window)' if paused else ''}")
    b = ph.get("batch", {})
    lines = [*rows, ""]
    if b:
        lines.append(f"batch: {b.get('seconds', 0):.0f} s of {LOAD_CLIENTS} x {LOAD_TOKENS}-token generations "
                     f"(--max-num-seqs 2): {b.get('checks')} check results, all {', '.join(b.get('verdicts', []))}; "
                     f"the classic watchdog failed {b.get('classic_failed')} of {b.get('classic_probes')} probes; "
                     f"the server counted {b.get('server_completions'):.0f} /v1/completions = the load's "
                     f"{b.get('load_sent')}, {b.get('server_length'):.0f} finished at max_tokens, "
                     f"{b.get('server_prompt_tokens'):.0f} prompt tokens (load prompt, chat prompt: "
                     f"{b.get('prompt_tokens')}): the check sent nothing")
    for name in ("hang", "dead"):
        p = ph.get(name)
        if p:
            lines.append(f"{name}: the check said {' > '.join(_dedup(p.get('verdicts_before', [])))} | restart | "
                         f"{' > '.join(_dedup(p.get('verdicts_after', [])))}")
            lines.append(f"{name}: first OK: {p.get('first_ok', '').strip()}")
            lines.append(f"{name}: lost requests failed with: {'; '.join(p.get('lost_kinds', [])) or '-'}")
            for k, v in (p.get("manual") or {}).items():
                lines.append(f"{name}: check_vllm_restart by hand ({k}): {v.split(': ', 1)[-1][:200]}")
            if p.get("supervisord"):
                lines.append(f"{name}: supervisord: {' | '.join(p['supervisord'])}")
    d = ph.get("downtime")
    if d:
        lines.append(f"downtime: a {d.get('downtime')} s window; the check said "
                     f"{' > '.join(_dedup(d.get('verdicts_in_downtime', [])))}; {d.get('ours')} restart, "
                     f"{_s(d.get('restart_after_downtime_end'))} after the window ended, OK "
                     f"{_s(d.get('restart_to_ok'))} later; the restart service said "
                     f"{', '.join(d.get('restart_service', []))}")
    lines.append(f"settings: check every {CHECK_INTERVAL} s, retry {RETRY_INTERVAL} s, max_check_attempts "
                 f"{MAX_ATTEMPTS}; " + ", ".join(f"{k.replace('vllm_', '')}={v}"
                                                 for k, v in {**CHECK_VARS, **HANDLER_VARS}.items())
                 + f"; classic: chat every {WATCH_INTERVAL:g} s, timeout {WATCH_TIMEOUT:g} s, "
                   f"{WATCH_FAILURES} failures in a row")
    lines.append("components: " + "; ".join(f"{k} {v}" for k, v in versions.items()))
    lines.append(f"heavy lock: {w.measured.get('lock')}; vLLM processes killed by hand at the end: "
                 f"{w.measured.get('killed by hand at the end')}")
    return "\n".join(lines)


def _dedup(xs: list[str]) -> list[str]:
    """['busy', 'busy', 'stalling'] -> ['busy (2)', 'stalling']"""
    out = []
    for x, group in itertools.groupby(xs):
        n = len(list(group))
        out.append(f"{x} ({n})" if n > 1 else x)
    return out
