"""The restart marker: where check_vllm_restart notes that it restarted a server (or is restarting it now),
read by the check, which then reads a server that does not serve yet as starting, not down."""

from __future__ import annotations

import os
from pathlib import Path

from check_vllm.contract.instants import Instant, seconds_between
from check_vllm.memory.codec import instant_json, instant_of
from check_vllm.memory.files import MAX_BYTES, read_regular
from check_vllm.memory.statefile import StateError, open_nofollow
from check_vllm.memory.strictjson import parse_json
from check_vllm.memory.target import key_path, legacy_key, target_key


def marker_path(state_dir: Path, url: str, legacy: bool = False) -> Path:
    """Where the restart handler notes that it restarted this server (read by the check)."""
    key = (legacy_key if legacy else target_key)(url, "restart")
    return key_path(state_dir, key, ".restart.json")


#: A marker that says "restart in progress" for longer than this is a handler that died mid-restart.
RESTART_IN_PROGRESS_MAX = 1200.0


def marker_json(at: Instant, **fields: object) -> dict[str, object]:
    """The marker's JSON: the restart's time on the wall clock, with the boot-time clock beside it, so a
    wall-clock step while the model loads neither ends nor stretches the start-up grace."""
    return {**instant_json(at, "restarted_at"), **fields}


def load_marker(path: Path, now: Instant) -> tuple[Instant | None, str | None]:
    """When the handler last restarted the server (or None), and what was wrong with the marker when
    there is one it cannot use. The handler's next restart replaces it."""
    try:
        fd = open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)  # a planted FIFO must not block us
    except FileNotFoundError:
        return None, None
    except (OSError, StateError) as err:
        return None, f"restart marker unreadable ({getattr(err, 'strerror', None) or err}); ignored"
    raw = read_regular(fd, path.parent)
    if isinstance(raw, str):
        return None, f"restart marker {raw}; ignored"
    if isinstance(raw, OSError):
        return None, f"restart marker unreadable ({raw.strerror}); ignored"
    doc = parse_json(raw) if len(raw) <= MAX_BYTES else None
    at = instant_of(doc, "restarted_at") if isinstance(doc, dict) else None
    if at is None or not isinstance(doc, dict):
        return None, "restart marker corrupt; ignored"
    if doc.get("in_progress") is True and 0 <= seconds_between(at, now) < RESTART_IN_PROGRESS_MAX:
        # the handler's restart command is still running: the server is being restarted now, whatever the
        # check saw since the command began (a frozen server answers /metrics until it is stopped)
        return now, None
    return at, None


def read_marker(path: Path, now: Instant) -> Instant | None:
    """When the handler last restarted the server, or None."""
    return load_marker(path, now)[0]
