"""Issue 46, case 6: on Docker each container restart gets a new network namespace, so a new state key and a new
file pair in the shared volume, and nothing removed the old ones. The installed check run here removes those of
another namespace untouched for two days, a few a run, and nothing else: not a recent file of another namespace (a
live container's), not this namespace's, not a remote URL's (no namespace), not a file that is not ours."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from check_vllm.memory import prune
from check_vllm.memory.statefile import FORMAT, VERSION
from check_vllm.memory.target import file_stem, network_namespace
from tests.rig.pages import PageServer, page
from tests.rig.scripts import FAST, run_check

OLD = time.time() - prune.STALE - 3600


def _state(home: Path, target: str, mtime: float, body: dict | None = None) -> Path:
    path = home / f"vllm-{file_stem(target)}.json"
    path.write_text(json.dumps(body or {"format": FORMAT, "version": VERSION, "target": target, "written": mtime,
                                        "data": {}}))
    path.with_suffix(".lock").write_text("")
    for p in (path, path.with_suffix(".lock")):
        os.utime(p, (mtime, mtime))
    return path


def test_only_stale_files_of_another_namespace_are_removed(tmp_path: Path):
    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    mine = network_namespace()
    gone = [_state(home, f"metrics http://loopback:{8000 + n} net:[{4026530000 + n}]", OLD) for n in range(3)]
    kept = [
        _state(home, "metrics http://loopback:9000 net:[4026539999]", time.time() - 60),  # a live container's
        _state(home, f"metrics http://loopback:9001 {mine}", OLD),  # this namespace's: not a gone container's
        _state(home, "metrics http://gpu-7.example:8000", OLD),  # a remote URL: no namespace
        _state(home, "x net:[1]", OLD, {"format": "someone else's", "target": "x net:[1]"}),  # not ours
    ]
    with PageServer(page("idle")) as srv:
        r = run_check(home, "-u", srv.url, *FAST)
    assert r.code == 0, r.out
    left = {p.name for p in home.iterdir()}
    assert not any(p.name in left or p.with_suffix(".lock").name in left for p in gone), sorted(left)
    assert all(p.name in left and p.with_suffix(".lock").name in left for p in kept), sorted(left)


def test_each_run_looks_at_a_bounded_window(tmp_path: Path):
    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    for n in range(prune.LOOK * 3):
        _state(home, f"metrics http://loopback:{8000 + n} net:[{4026530000 + n}]", OLD)
    now = time.time()
    first = prune.sweep(home, now)
    assert len(first) == prune.LOOK
    second = prune.sweep(home, now + 60)  # the next minute's window: the rest, a window at a time
    assert len(second) == prune.LOOK and not set(first) & set(second)
