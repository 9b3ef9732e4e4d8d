"""check_vllm_restart's fleet restart budget asked of the Icinga 2 API (issue 55, point 2) end to end: the installed
handler, a planted stuck verdict, and a loopback HTTPS server answering the object query as Icinga 2 2.13 does
(POST /v1/objects/services with X-HTTP-Method-Override: GET, basic auth, a certificate of a private CA). Over the
budget it holds and says why, within it it restarts; a refused user, an empty group, a broken answer, nothing
listening, an untrusted certificate: the fleet was not asked and --fleet-unasked decides. The ApiUser's password
never reaches a line, the log or --status, nor a server whose certificate is not the CA's."""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from check_vllm.memory.statefile import check_file
from tests.rig import private_ca
from tests.rig.ports import free_port
from tests.rig.scripts import Result, run_script

URL = "http://127.0.0.1:1"  # the server's process is nowhere: the planted verdict is all the handler goes on
USER, PASSWORD = "fleet", "pw-7f3a-do-not-show"
STUCK = "VLLM CRITICAL - stuck: no progress for 12 s over 2 readings; 2 running, 2 waiting"
BUSY = "VLLM OK - busy: 2 running, 3 waiting, 12 tok/s"
Reply = Callable[[dict[str, Any]], tuple[int, bytes]]


def plant_stuck(state: Path) -> None:
    state.mkdir(exist_ok=True, mode=0o700)
    check_file(state, URL, proxy=False).save(
        {"verdict": {"word": "stuck", "state": 2, "text": "no progress over 2 readings", "at": time.time() - 1,
                     "engines": {}}})


def services(*lines: str) -> Reply:
    """The object query's answer: one service of the group per status line (its state the line's)."""
    def reply(body: dict[str, Any]) -> tuple[int, bytes]:
        states = {"OK": 0.0, "WARNING": 1.0, "CRITICAL": 2.0, "UNKNOWN": 3.0}
        results = [{"attrs": {"last_check_result": {"output": line, "state": states[line.split()[1]],
                                                    "type": "CheckResult"},
                              "state": states[line.split()[1]], "state_type": 1.0},
                    "joins": {}, "meta": {}, "name": f"gpu-{i:02}!vllm", "type": "Service"}
                   for i, line in enumerate(lines)]
        return 200, json.dumps({"results": results}).encode()
    return reply


@dataclass
class Asked:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class FakeIcinga:
    """Icinga 2's object query on 127.0.0.1 over TLS: basic auth checked, every request kept with its body."""

    reply: Reply
    tls: Any
    asked: list[Asked] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else None
                outer.asked.append(Asked(self.command, self.path, dict(self.headers), body))
                good = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                if self.headers.get("Authorization") != good:
                    status, data = 401, json.dumps({"error": 401, "status": "Unauthorized. Please check your user "
                                                                            "credentials."}).encode()
                elif self.path != "/v1/objects/services" or self.headers.get("X-HTTP-Method-Override") != "GET":
                    status, data = 404, b'{"error":404,"status":"No objects found."}'
                else:
                    status, data = outer.reply(body or {})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> private_ca.PrivateCA:
    return private_ca.make(tmp_path_factory.mktemp("icinga-ca"))


@contextmanager
def icinga(ca: private_ca.PrivateCA, reply: Reply) -> Iterator[FakeIcinga]:
    fake = FakeIcinga(reply, ca.server_context())
    thread = threading.Thread(target=fake.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def handler(tmp: Path, ca: private_ca.PrivateCA, where: str, *extra: str, status: bool = False,
            login: str = f"{USER}:{PASSWORD}\n", ca_file: bool = True) -> Result:
    plant_stuck(tmp / "state")
    user_file = tmp / "icinga-user"
    user_file.write_text(login)
    fleet = ("--fleet-icinga", where, "--fleet-icinga-user-file", str(user_file), "--fleet-group", "gpu-a",
             "--fleet-max", "2", *(("--fleet-ca-file", str(ca.ca)) if ca_file else ()), *extra)
    common = ("--url", URL, "--state-dir", str(tmp / "state"), "--no-post-mortem", "--log", str(tmp / "log"),
              *fleet)
    if status:
        out = run_script("check_vllm_restart", "--status", *common)
    else:
        command = [sys.executable, "-c", f"open({str(tmp / 'restarted')!r}, 'w').write('yes')"]
        out = run_script("check_vllm_restart", "--state", "CRITICAL", "--state-type", "HARD", "--attempt", "3",
                         *common, "--", *command, env=dict(os.environ))
    logged = (tmp / "log").read_text() if (tmp / "log").exists() else ""
    assert PASSWORD not in out.out + out.err + logged, out.out + out.err + logged
    return out


def test_over_the_budget_it_holds_and_names_the_servicegroup_and_the_icinga_2_it_asked(tmp_path, ca):
    with icinga(ca, services(STUCK, STUCK, STUCK, BUSY)) as api:
        out = handler(tmp_path, ca, api.url)
        status = handler(tmp_path, ca, api.url, status=True)
    assert out.code == 0 and ": restart refused: verdict 'stuck'" in out.out, out.out + out.err
    assert out.out.rstrip().endswith(
        f"but fleet budget: 3 of 4 servers of servicegroup gpu-a in Icinga 2 at {api.url} are proven stuck or "
        "starting (at most 2 at once): not restarting, a person decides"), out.out
    assert not (tmp_path / "restarted").exists()
    assert status.code == 1 and status.out.startswith("VLLM_RESTART WARNING - held back: verdict 'stuck'"), status.out
    assert "fleet budget: 3 of 4 servers of servicegroup gpu-a" in status.out
    first = api.asked[0]
    assert [(a.method, a.path) for a in api.asked] == [("POST", "/v1/objects/services")] * 2  # one question a call
    assert first.headers["X-HTTP-Method-Override"] == "GET" and first.headers["Accept"] == "application/json"
    assert first.body == {"filter": "group in service.groups", "filter_vars": {"group": "gpu-a"},
                          "attrs": ["state", "state_type", "last_check_result"]}


def test_within_the_budget_it_restarts_counting_starting_and_not_stalling(tmp_path, ca):
    lines = (STUCK, "VLLM WARNING - starting: restarted 12 s ago, not serving yet",
             "VLLM WARNING - stalling: no progress for 12 s over 1 reading", BUSY, BUSY)
    with icinga(ca, services(*lines)) as api:
        out = handler(tmp_path, ca, api.url)
    assert out.code == 0 and ": restarted: verdict 'stuck'" in out.out, out.out + out.err
    assert f"fleet budget: 2 of 5 servers of servicegroup gpu-a in Icinga 2 at {api.url} are proven stuck or " \
           "starting (at most 2 at once)" in out.out, out.out
    assert (tmp_path / "restarted").read_text() == "yes"


@pytest.mark.parametrize(("reply", "login", "said"), [
    (services(STUCK), f"{USER}:wrong\n", "the Icinga 2 API refused the user (HTTP 401: Unauthorized. Please "
                                         "check your user credentials.)"),
    (services(), f"{USER}:{PASSWORD}", "knows no service of servicegroup gpu-a"),
    (lambda body: (200, b"<html>not JSON</html>"), f"{USER}:{PASSWORD}", "gave no object query answer"),
    (lambda body: (200, b'{"results": [{"name": "x"}]}'), f"{USER}:{PASSWORD}", "gave no object query answer"),
    (lambda body: (500, b'{"error": 500, "status": "Error: boom"}'), f"{USER}:{PASSWORD}",
     "the Icinga 2 API answered HTTP 500: Error: boom"),
], ids=["401", "empty group", "not JSON", "malformed", "500"])
def test_an_answer_that_is_no_count_is_not_asked_and_the_operator_decides(tmp_path, ca, reply, login, said):
    with icinga(ca, reply) as api:
        go = handler(tmp_path, ca, api.url, login=login)
        (tmp_path / "again").mkdir()
        held = handler(tmp_path / "again", ca, api.url, "--fleet-unasked", "hold", login=login)
    assert go.code == 0 and ": restarted: " in go.out, go.out + go.err
    assert "the fleet was not asked (" in go.out and said in go.out, go.out
    assert "restarting (--fleet-unasked restart)" in go.out, go.out
    assert held.code == 0 and ": restart refused: " in held.out and "holding (--fleet-unasked hold)" in held.out
    assert not (tmp_path / "again" / "restarted").exists()


def test_nothing_listening_is_not_asked(tmp_path, ca):
    nowhere = f"https://127.0.0.1:{free_port()}"
    out = handler(tmp_path, ca, nowhere, "--fleet-unasked", "hold")
    assert f"the fleet was not asked (Icinga 2 at {nowhere}: connection refused): holding" in out.out, out.out


def test_a_certificate_not_of_the_ca_gets_no_password(tmp_path, ca):
    with icinga(ca, services(STUCK)) as api:
        out = handler(tmp_path, ca, api.url, "--fleet-unasked", "hold", ca_file=False)
    assert f"the fleet was not asked (Icinga 2 at {api.url}: " in out.out and "holding" in out.out, out.out
    assert "CERTIFICATE_VERIFY_FAILED" in out.out, out.out
    assert api.asked == []  # the TLS handshake failed: no request, no Authorization header, went out


def test_a_slow_icinga_costs_at_most_the_fleet_timeout(tmp_path, ca):
    def slow(body: dict[str, Any]) -> tuple[int, bytes]:
        time.sleep(30)
        return services(STUCK)(body)
    with icinga(ca, slow) as api:
        began = time.monotonic()
        out = handler(tmp_path, ca, api.url, "--fleet-timeout", "1", "--fleet-unasked", "hold")
        took = time.monotonic() - began
    assert "the fleet was not asked (Icinga 2 at" in out.out and "timed out" in out.out, out.out
    assert took < 5, took  # --fleet-timeout 1, x5 for a loaded machine (the answer would take 30 s)


@pytest.mark.parametrize(("where", "login", "said"), [
    (f"https://{USER}:{PASSWORD}@127.0.0.1:5665", f"{USER}:{PASSWORD}", "must not carry user:password"),
    ("http://127.0.0.1:5665", f"{USER}:{PASSWORD}", "must be an https:// URL"),
    ("https://127.0.0.1:5665", PASSWORD, "holds no user:password line"),
])
def test_a_bad_source_or_login_is_a_usage_error_that_shows_no_secret(tmp_path, ca, where, login, said):
    out = handler(tmp_path, ca, where, login=login)
    assert out.code == 2 and "usage error" in out.out and said in out.out, out.out + out.err
    status = handler(tmp_path, ca, where, login=login, status=True)
    assert status.code == 3 and status.out.startswith("VLLM_RESTART UNKNOWN - usage: ") and said in status.out
