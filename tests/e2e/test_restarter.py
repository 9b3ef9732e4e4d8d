"""contrib/docker/restart-unhealthy run as shipped by /bin/sh, with a stand-in docker client that keeps which
containers are unhealthy now (`ps`, `inspect`) and replays health events (`events`): restarts by level, not
by edge (issue 36, case 3), at most one per container per COOLDOWN (the real dockerd run is the containers
tier's)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rig.waiting import wait_for

SHELL = "/bin/sh"
SCRIPT = Path(__file__).resolve().parents[2] / "contrib" / "docker" / "restart-unhealthy"

#: $DIR/unhealthy: one "ID NAME" a line, the containers unhealthy now; $DIR/events: the lines the first `docker
#: events` prints before its stream ends (later ones block, as a quiet stream does); every call is logged. As the
#: real client does, `ps` prints an ID cut to 12 hex digits unless --no-trunc (docker/cli's formatter
#: TruncateID), while `events` prints the full 64 of .Actor.ID. $DIR/status.ID, when there, is the health
#: status `inspect` says now (the health check's latest word, after the event or the `ps` line was printed).
FAKE = """#!/bin/sh
echo "$*" >> "$DIR/calls"
case "$1" in
  ps) case " $* " in *" --no-trunc "*) cut=64 ;; *) cut=12 ;; esac
      while read -r id name; do echo "$(echo "$id" | cut -c1-$cut) $name unhealthy-now"; done < "$DIR/unhealthy" ;;
  inspect) id=$(eval echo \\${$#})
           if [ -e "$DIR/status.$id" ]; then cat "$DIR/status.$id"
           elif grep -q "^$id " "$DIR/unhealthy"; then echo unhealthy; else echo healthy; fi ;;
  events) if [ ! -e "$DIR/events.done" ]; then : > "$DIR/events.done"; cat "$DIR/events"; exit 0; fi
          exec sleep 60 ;;
  restart) id=$(eval echo \\${$#}); echo "$id" >> "$DIR/restarts" ;;
esac
"""


class Restarter:
    def __init__(self, tmp_path: Path, cooldown: int, unhealthy: str = "", events: str = "") -> None:
        self.dir = tmp_path
        fake = tmp_path / "docker"
        fake.write_text(FAKE)
        fake.chmod(0o755)
        (tmp_path / "unhealthy").write_text(unhealthy)
        (tmp_path / "events").write_text(events)
        self.log = tmp_path / "out"
        with self.log.open("w") as log:  # a file, not a pipe: its lines can be awaited while it runs
            self.proc = subprocess.Popen(
                [SHELL, str(SCRIPT), "--filter", "label=check_vllm.restart=unhealthy"],
                env={**os.environ, "DOCKER": str(fake), "DIR": str(tmp_path), "COOLDOWN": str(cooldown),
                     "RECONNECT": "1", "STATE_DIR": str(tmp_path / "state")},
                stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def restarts(self) -> list[str]:
        path = self.dir / "restarts"
        return path.read_text().split() if path.exists() else []

    def calls(self) -> list[str]:
        path = self.dir / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def out(self) -> str:
        return self.log.read_text()

    def stop(self) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=10)
        return self.out()


@pytest.fixture
def restarter(tmp_path: Path) -> Iterator:
    made: list[Restarter] = []

    def start(*args, **kwargs) -> Restarter:
        made.append(Restarter(tmp_path, *args, **kwargs))
        return made[-1]

    yield start
    for r in made:
        r.stop()


def test_a_container_unhealthy_before_the_restarter_starts_is_restarted(restarter):
    r = restarter(0, unhealthy="c1 vllm\n")
    wait_for("the restart", lambda: r.restarts(), 10)
    time.sleep(0.5)
    out = r.stop()
    assert r.restarts() == ["c1"], out
    assert "vllm unhealthy (docker ps): restarting" in out, out
    ps = [c for c in r.calls() if c.startswith("ps ")]
    assert ps and "--filter health=unhealthy --filter label=check_vllm.restart=unhealthy" in ps[0], ps


def test_each_unhealthy_event_restarts_without_a_cooldown(restarter, tmp_path):
    (tmp_path / "status.c1").write_text("unhealthy\n")  # each event read while it is still unhealthy
    r = restarter(0, events="c1 vllm health_status: unhealthy\nc1 vllm health_status: healthy\n"
                            "c1 vllm health_status: unhealthy\n")
    wait_for("two restarts", lambda: len(r.restarts()) >= 2, 10)
    out = r.stop()
    assert r.restarts() == ["c1", "c1"], out
    events = [c for c in r.calls() if c.startswith("events ")]
    assert "--filter event=health_status --filter label=check_vllm.restart=unhealthy" in events[0], events


@pytest.mark.parametrize("seen", ["event", "sweep"])
def test_a_container_healthy_again_before_its_line_is_read_is_left_alone(restarter, tmp_path, seen):
    """The event (or the `docker ps` line) said unhealthy, but by the time the loop reads it the health check
    passed again (its liveness probe held the restart for the fleet restart budget, say): the restarter acts on
    the probe's latest word, `docker inspect`'s, and restarts nothing."""
    (tmp_path / "status.c1").write_text("healthy\n")
    r = restarter(0, unhealthy="c1 vllm\n" if seen == "sweep" else "",
                  events="c1 vllm health_status: unhealthy\n" if seen == "event" else "")
    said = f"vllm {'unhealthy (docker ps)' if seen == 'sweep' else 'unhealthy'}: healthy now (its health check " \
           "passed since): not restarted"
    wait_for("the restarter to look at c1 and say so", lambda: said in r.out(), 10, diag=r.out)
    out = r.stop()
    assert r.restarts() == [], out
    assert any(c.startswith("inspect ") and c.endswith(" c1") for c in r.calls()), r.calls()


def test_unhealthy_again_within_the_cooldown_is_restarted_when_it_ends(restarter):
    """The second unhealthy spell comes inside the cooldown: held back, and restarted when the cooldown ends
    because it is still unhealthy then (dockerd says nothing more: the status did not change)."""
    r = restarter(3, unhealthy="c1 vllm\n")
    wait_for("the first restart", lambda: r.restarts(), 10)
    first = time.monotonic()
    wait_for("the restart when the cooldown ends", lambda: len(r.restarts()) >= 2, 15)
    waited = time.monotonic() - first
    out = r.stop()
    assert r.restarts() == ["c1", "c1"], out
    assert 1.5 <= waited, f"restarted again {waited:.1f} s after the first, inside its cooldown of 3 s: {out}"
    assert "within the cooldown: looked at again in " in out, out
    assert "vllm still unhealthy when its cooldown ended: restarting" in out, out


def test_healthy_again_when_the_cooldown_ends_is_left_alone(restarter, tmp_path):
    r = restarter(2, unhealthy="c1 vllm\n", events="c1 vllm health_status: unhealthy\n")
    wait_for("the first restart", lambda: r.restarts(), 10)
    (tmp_path / "unhealthy").write_text("")   # the restart cured it
    time.sleep(3.5)
    out = r.stop()
    assert r.restarts() == ["c1"], out
    assert any(c.startswith("inspect ") for c in r.calls()), "the cooldown's end asked how the container is now"


def test_a_broken_event_stream_is_followed_again_after_a_look_at_who_is_unhealthy(restarter, tmp_path):
    r = restarter(0)
    wait_for("the event stream to end and be followed again",
             lambda: sum(c.startswith("events ") for c in r.calls()) >= 2, 10)
    assert sum(c.startswith("ps ") for c in r.calls()) >= 2, r.calls()
    out = r.stop()
    assert "docker events ended" in out and r.restarts() == [], out


def test_a_state_directory_of_someone_else_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "state").symlink_to(target)
    done = subprocess.run([SHELL, str(SCRIPT)], env={**os.environ, "STATE_DIR": str(tmp_path / "state")},
                          capture_output=True, text=True, timeout=10)
    assert done.returncode == 2 and "refusing STATE_DIR" in done.stderr, done


FULL = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"


@pytest.mark.parametrize("first", ["sweep", "event"])
def test_one_container_is_one_name_whichever_path_saw_it(restarter, tmp_path, first):
    """`docker ps` cuts IDs to 12 digits, events carry all 64: kept under two names, a container the sweep
    restarted that an event reports unhealthy again was restarted at once, cooldown or not (and the reverse).
    One name (the full ID) for both: one restart within the cooldown."""
    event = f"{FULL} vllm health_status: unhealthy\n"
    (tmp_path / f"status.{FULL}").write_text("unhealthy\n")  # all along
    r = restarter(30, unhealthy=f"{FULL} vllm\n" if first == "sweep" else "",
                  events=event if first == "event" else "")
    wait_for("the first restart", lambda: r.restarts(), 10)
    (r.dir / "events").write_text(event)  # the other path sees it too: an event after the sweep ...
    (r.dir / "events.done").unlink(missing_ok=True)
    (r.dir / "unhealthy").write_text(f"{FULL} vllm\n")  # ... and a sweep after the event (the stream ends)
    wait_for("the other path to look", lambda: sum(c.startswith("ps ") for c in r.calls()) >= 2
             and sum(c.startswith("events ") for c in r.calls()) >= 2, 10)
    time.sleep(1.0)
    out = r.stop()
    assert r.restarts() == [FULL], out
    assert "within the cooldown" in out, out
    assert all("--no-trunc" in c for c in r.calls() if c.startswith("ps ")), r.calls()
