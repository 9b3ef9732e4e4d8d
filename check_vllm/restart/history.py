"""The restart history check_vllm_restart keeps beside the check's state file: its path and its reading.

Every entry is rebuilt from the fields the handler uses, each of the right type, so what is saved back
is always valid whatever the file held; the cooldown and the circuit breaker count these entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from check_vllm.contract.instants import Instant
from check_vllm.contract.numbers import finite
from check_vllm.memory.statefile import StateFile
from check_vllm.memory.target import earlier_keys, key_path, legacy_key, target_key
from check_vllm.restart.policy import CLOCK_SLACK

#: Restarts kept on record (the breaker looks at one hour; the rest is for people).
HISTORY_KEEP = 100


def history_path(state_dir: Path, url: str, legacy: bool = False) -> Path:
    """Beside the restart marker, named by the marker's key."""
    return key_path(state_dir, (legacy_key if legacy else target_key)(url, "restart"), ".restart-history.json")


def history_file(state_dir: Path, url: str, lock_timeout: float) -> StateFile:
    """The history of one server, keyed by the server, not by the spelling of its URL; a history kept under
    the spelling (before the key was canonical) is read until the first save, so no cooldown or breaker is
    lost in the change."""
    return StateFile(history_path(state_dir, url), target_key(url, "restart-history"), lock_timeout,
                     what="restart history", fresh="starting afresh",
                     legacy=tuple((key_path(state_dir, named, ".restart-history.json"), key) for named, key
                                  in zip(earlier_keys(url, "restart"), earlier_keys(url, "restart-history"), strict=True)))


def output_path(state_dir: Path, url: str) -> Path:
    """What the last restart command wrote (and a server it left running may still be writing)."""
    return key_path(state_dir, target_key(url, "restart"), ".restart-output.log")


def _entry(raw: Any) -> dict[str, Any] | None:
    """One restart of the history rebuilt from the fields it uses, each of the right type; None when it
    has no usable time. What is saved back is then always valid, whatever the file held."""
    if not isinstance(raw, dict):
        return None
    at = finite(raw.get("at"))
    if at is None:
        return None
    rc = raw.get("rc")
    entry: dict[str, Any] = {
        "at": at,
        "verdict": raw["verdict"][:40] if isinstance(raw.get("verdict"), str) else None,
        "command": raw["command"][:200] if isinstance(raw.get("command"), str) else "",
        "rc": rc if isinstance(rc, int) and not isinstance(rc, bool) and abs(rc) < 1 << 31 else None,
    }
    for key in ("seconds", "done", "mono"):
        value = finite(raw.get(key))
        if value is not None:
            entry[key] = value
    if "mono" in entry and isinstance(raw.get("boot"), str) and raw["boot"]:
        entry["boot"] = raw["boot"][:64]
    else:
        entry.pop("mono", None)
    return entry


def stamp(at: Instant, key: str = "at") -> dict[str, Any]:
    """An entry's time: `key` on the wall clock, and the boot-time clock of that moment beside it ("mono",
    "boot": always of the moment the restart counts from, the latest of "at" and "done")."""
    out: dict[str, Any] = {key: at.wall}
    if at.mono is not None and at.boot:
        out.update(mono=at.mono, boot=at.boot)
    return out


def load_history(store: StateFile) -> tuple[list[dict[str, Any]], str | None]:
    """The restarts on record, each valid, and what was wrong with the file when part or all of it could
    not be used (the handler still decides, on what is left)."""
    data, problem = store.load()
    raw = data.get("restarts")
    if problem is None and data and not isinstance(raw, list):
        problem = f"{store.what} corrupt; {store.fresh}"
    listed: list[Any] = raw if isinstance(raw, list) else []
    entries = [e for e in map(_entry, listed) if e is not None]
    if problem is None and len(entries) < len(listed):
        problem = f"{len(listed) - len(entries)} unusable {store.what} entries dropped"
    return entries[-HISTORY_KEEP:], problem


def counted_from(entry: dict[str, Any], now: Instant | None = None) -> float:
    """When a restart counts, on `now`'s wall clock: from when its command finished, if it did (a verdict
    written while the old process was being stopped is still a verdict about the old process). Measured
    back from `now` on the boot-time clock when the entry has one of this boot, so a wall-clock step lets
    no cooldown pass early and holds none back."""
    wall = max(entry["at"], entry.get("done", entry["at"]))
    if now is not None and now.mono is not None and entry.get("boot") == now.boot and "mono" in entry:
        return now.wall - (now.mono - entry["mono"])
    return wall


def restart_times(entries: list[dict[str, Any]], now: Instant | None = None) -> list[float]:
    """The history as the cooldown and the circuit breaker count it (on `now`'s clocks)."""
    return [counted_from(e, now) for e in entries]


def bring_back(entries: list[dict[str, Any]], at: Instant) -> str | None:
    """Restarts dated in the future (the clock stepped back since they were written) are dated `now`,
    in place: the cooldown and the breaker then count them from the moment the step was seen. Left as
    they were, they would refuse every restart until the clock caught up, hours for a large step.
    Says what it changed, or None."""
    now = at.wall
    ahead = max((counted_from(e, at) - now for e in entries), default=0.0)
    if ahead <= CLOCK_SLACK:
        return None
    for e in entries:
        e["at"] = min(e["at"], now)
        if "done" in e:
            e["done"] = min(e["done"], now)
    return f"restart history dated up to {ahead:.0f} s in the future (the clock stepped back): counted from now"
