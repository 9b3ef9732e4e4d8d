"""The soak's driver: normal traffic, then each fault of the schedule in turn, windows recorded.

Windows, in order: boot (supervisord's start to the first OK), then for each fault: normal (traffic only,
at least the fault's `normal_before`, longer while the fault waits for an old process or the handler's
cooldown), fault:<kind> (from the fault to the first OK after it recovered) and after:<kind> (the
settle time after it). A last normal window fills the run up to SOAK_MINUTES.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

from tests.rig.incident import World, wait

from .faults import NEEDS_COOLDOWN, NEEDS_OLD, Fault, autogroup, burners, hold_signal, signal_engine, stop_all
from .sampler import Sampler
from .settings import MAX_NUM_SEQS, Soak
from .traffic import Traffic


@dataclass
class Window:
    name: str
    kind: str          # boot | normal | fault | after
    t0: float
    t1: float = 0.0
    fault: Fault | None = None


@dataclass
class Run:
    soak: Soak
    w: World
    traffic: Traffic
    sampler: Sampler
    windows: list[Window] = field(default_factory=list)
    error: str = ""

    # -- windows
    def open(self, name: str, kind: str, fault: Fault | None = None) -> Window:
        now = self.w.enter(name)
        if self.windows and not self.windows[-1].t1:
            self.windows[-1].t1 = now
        win = Window(name, kind, now, fault=fault)
        self.windows.append(win)
        return win

    def close(self) -> None:
        if self.windows and not self.windows[-1].t1:
            self.windows[-1].t1 = time.time()

    # -- what the parts say
    def first_ok_after(self, t: float, timeout: float) -> dict:
        return wait("the check OK again", lambda: next(
            (r for r in self.w.results(t) if r["state"] == 0 and r.get("start", r["at"]) >= t), None),
            timeout, diag=self.w.diag)

    def new_entry(self, n0: int, done: bool, timeout: float) -> dict | None:
        def got():
            h = self.w.history()
            return h[n0] if len(h) > n0 and (h[n0].get("done") or not done) else None
        try:
            return wait("check_vllm_restart's restart", got, timeout, interval=0.2)
        except AssertionError:
            return None

    def process_age(self) -> float:
        try:
            info = self.w.sup.info()
        except Exception:  # noqa: BLE001 - supervisord busy: treat as young, look again
            return 0.0
        return time.time() - float(info.get("start") or time.time()) if info.get("pid") else 0.0

    def ready_for(self, f: Fault) -> bool:
        hist = self.w.history()
        if f.kind in NEEDS_COOLDOWN and hist:
            last = hist[-1].get("done") or hist[-1]["at"]
            if time.time() - last < self.soak.cooldown + 3:
                return False
        return f.kind not in NEEDS_OLD or self.process_age() > self.soak.start_grace + 5

    # -- the run
    def run(self, faults: list[Fault], t_end: float) -> None:
        for f in faults:
            self.open("normal", "normal")
            t = time.time()
            while time.time() - t < f.normal_before or not self.ready_for(f):
                time.sleep(0.5)
            self.fault(f)
        self.open("normal", "normal")
        t = time.time()
        while time.time() < t_end or time.time() - t < max(20.0, self.soak.check_interval * 5):
            time.sleep(0.5)
        self.close()

    def fault(self, f: Fault) -> None:
        rec = f.record
        self.traffic.sustain(2 * MAX_NUM_SEQS)
        wait("the server busy before the fault", lambda: (p := self.sampler.points[-1:]) and p[0].running >= 1,
             120, diag=self.w.diag)
        self.open(f"fault:{f.kind}", "fault", f)
        rec["history_before"] = len(self.w.history())
        rec["injected"] = time.time()
        getattr(self, "_" + f.kind)(f, rec)
        ok = self.first_ok_after(rec["recovered"], 1200 if self.soak.long else 300)
        rec["first_ok"], rec["first_ok_output"] = ok["at"], ok["output"][:160]
        self.traffic.release()
        self.open(f"after:{f.kind}", "after", f)
        time.sleep(self.soak.check_interval * (3 if self.soak.long else 5))

    def _short_stop(self, f: Fault, rec: dict) -> None:
        engine = self.w.sup.engine_core_pid()
        signal_engine(engine, signal.SIGSTOP)
        self.w.event(f"SIGSTOP VLLM::EngineCore {engine} for {f.hold:g} s (< --stuck-seconds {self.soak.stuck_seconds:g})")
        hold_signal(f.hold)
        signal_engine(engine, signal.SIGCONT)
        rec["recovered"] = self.w.event(f"SIGCONT VLLM::EngineCore {engine}")

    def _long_stop(self, f: Fault, rec: dict) -> None:
        engine = self.w.sup.engine_core_pid()
        signal_engine(engine, signal.SIGSTOP)
        self.w.event(f"SIGSTOP VLLM::EngineCore {engine} until the handler restarts it")
        timeout = 900 if self.soak.long else 150
        try:
            self.new_entry(rec["history_before"], done=False, timeout=timeout)
        finally:
            signal_engine(engine, signal.SIGCONT)  # a frozen process must be able to die of supervisord's TERM
        self._restarted(rec, timeout)

    def _kill(self, f: Fault, rec: dict) -> None:
        engine = self.w.sup.engine_core_pid()
        signal_engine(engine, signal.SIGKILL)
        self.w.event(f"SIGKILL VLLM::EngineCore {engine}")
        self._restarted(rec, 900 if self.soak.long else 150)

    def _restarted(self, rec: dict, timeout: float) -> None:
        entry = self.new_entry(rec["history_before"], done=True, timeout=timeout)
        rec["restart"] = entry
        rec["recovered"] = (entry or {}).get("done") or time.time()
        if entry is None:  # the server stays down: the run cannot go on (the report says why)
            self.w.event("no restart by the handler within the fault's time")
            raise AssertionError(f"no restart by the handler within {timeout:g} s: "
                                 + " | ".join(self.w.handler_lines()[-2:]))

    def _operator(self, f: Fault, rec: dict) -> None:
        self.w.event("operator: supervisorctl restart vllm (under load)")
        out = self.w.sup.ctl("restart", "vllm", timeout=300)
        rec["operator"] = (out.stdout + out.stderr).strip()[-200:]
        rec["operator_seconds"] = time.time() - rec["injected"]
        rec["recovered"] = self.w.event(f"supervisorctl restart returned {out.returncode} after "
                                        f"{rec['operator_seconds']:.1f} s: {rec['operator'][:80]}")
        self.w.sup.wait_healthy(300)

    def _slow_metrics(self, f: Fault, rec: dict) -> None:
        pid = self.w.sup.pid()
        rec["autogroup"] = autogroup(pid)
        procs = burners(2)
        self.w.event(f"2 CPU burners started (own autogroups, nice 0) against the API server's "
                     f"autogroup ({rec['autogroup']}) for {f.hold:g} s")
        try:
            hold_signal(f.hold)
        finally:
            stop_all(procs)
        rec["recovered"] = self.w.event("CPU burners stopped")
        lat = [p.latency for p in self.sampler.served(rec["injected"], rec["recovered"])]
        base = [p.latency for p in self.sampler.served(rec["injected"] - 20, rec["injected"])]
        rec["metrics_latency"] = {"during_max": max(lat, default=None), "during_n": len(lat),
                                  "during_median": sorted(lat)[len(lat) // 2] if lat else None,
                                  "before_median": sorted(base)[len(base) // 2] if base else None}
