"""Whatever text the server sends, the check's first line stays one clean, bounded plugin line, end to end.

A model id (a `model_name` label, a /v1/models id), an error body or a malformed status line reaches the
status text. It must not forge a second line (newline, CR), colour or rewrite a terminal (ESC, C1), carry
a NUL, split the perfdata off early (`|`, which nagiosplugin would strip with a warning line), push the
perfdata out of the ~1 KB a scheduler shows, or crash the output under an ASCII stdout.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest

from .conftest import FAST, Loopback, RawServer, answer, metrics_from, read_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real"
CODES = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}
#: Every control character (C0, DEL, C1) and the Unicode line separators; "\n" ends lines and is checked apart.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")

HOSTILE = {
    "ESC colour codes": "tiny\x1b[31mRED\x1b[0m\x1b]0;title\x07-llama",
    "a newline": "tiny\nVLLM OK - forged second line | forged=1",
    "CR, NUL, DEL and C1": "tiny\r\x00\x7f\x85\x9b-llama",
    "a pipe": "tiny|forged_perf=1;;;0 | more=2",
    "non-ASCII": "模型-ünïcødé-🦙-\u2028-llama",
    # 10 KB of all of these: the length alone the old code already cut (model ids at 200, error texts at 120)
    "10 KB of all of them": ("\x1b[41m|\n\r\x00模型🦙" * 1100)[:10240],
}
ENVS = {
    "default": {},
    "LC_ALL=C": {"LC_ALL": "C", "LANG": "C"},
    "ASCII stdout": {"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"},
}


def _label(value: str) -> str:
    """A Prometheus label value, escaped as the exposition format requires (\\\\, \\", \\n)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _idle_page(model: str) -> bytes:
    """The real idle page, its first model_name (the one the check probes with) set to `model`."""
    text = (FIXTURES / "idle.txt").read_text()
    assert 'model_name="tiny-llama"' in text
    return text.replace('model_name="tiny-llama"', f'model_name="{_label(model)}"', 1).encode()


def _not_found(model: str) -> tuple[int, bytes, dict[str, str]]:
    """vLLM's own 404 for an unknown model: its message quotes the model back."""
    doc = {"object": "error", "message": f"The model `{model}` does not exist.", "type": "NotFoundError",
           "param": None, "code": 404}
    return answer(404, json.dumps(doc), "application/json")


def clean_output(r, env: dict[str, str], verbose: bool = False) -> str:
    """The first line, after asserting all that makes it safe; returns the status text. With -v the
    perfdata moves to the end of the long output, so only then may the first line lack it."""
    lines = r.out.split("\n")
    first = lines[0]
    assert CONTROL.search(r.out) is None, f"control character in the output: {r.out[:300]!r}"
    assert "removed illegal characters" not in r.out, r.out  # nagiosplugin had to strip a '|'
    assert len(first.encode("utf-8")) < 1024, f"{len(first.encode())} bytes: {first[:200]!r}..."
    status, sep, perf = first.partition(" | ")
    assert "|" not in status, status  # the only '|' on the line is the perfdata separator
    if not verbose:
        assert sep and perf.startswith("kv_cache_usage="), first  # the perfdata survived, whole
    assert "VLLM OK - forged" not in r.out.replace(first, "", 1), r.out  # no forged second status line
    assert r.code == CODES[first.split()[1]], (r.code, first)  # the exit code is the line's verdict
    if env.get("PYTHONIOENCODING") == "ascii":
        assert r.out.isascii(), r.out[:300]
    return status


@pytest.mark.parametrize("env", list(ENVS.values()), ids=list(ENVS))
@pytest.mark.parametrize("model", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_model_name_and_error_body(check, model, env):
    """The page's model_name is what the probe asks for; the 404 quotes it back, as vLLM does."""
    with Loopback({"GET /metrics": metrics_from(lambda: _idle_page(model)),
                   "POST /v1/completions": lambda h: _not_found(model)}) as srv:
        r = check("-u", srv.url, *FAST, env=env)
        assert "POST /v1/completions" in srv.paths(), srv.paths()  # the probe ran: the text reached the line
        status = clean_output(r, env)
        assert r.word == "idle" and r.code in (0, 1), r.out  # the probe was refused: no proof of anything
        assert "404" in status, status
        time.sleep(0.4)  # past --min-gap: a second full reading and probe, not a repeated verdict
        r = check("-u", srv.url, "-v", *FAST, env=env)  # the long output too
        clean_output(r, env, verbose=True)
        assert "404" in r.first, r.out
        assert all(len(line.encode()) < 1024 for line in r.out.splitlines()), r.out


@pytest.mark.parametrize("env", list(ENVS.values()), ids=list(ENVS))
@pytest.mark.parametrize("model", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_model_id_from_v1_models(check, model, env):
    """No /metrics (404): /v1/models answers, and the check names the model it lists."""
    doc = {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "vllm"}]}
    with Loopback({"GET /metrics": lambda h: answer(404, '{"detail":"Not Found"}', "application/json"),
                   "GET /v1/models": lambda h: answer(200, json.dumps(doc), "application/json")}) as srv:
        r = check("-u", srv.url, *FAST, env=env)
        clean_output(r, env)
        assert r.word == "no metrics" and r.code == 1, r.out


def _status_line(raw: bytes):
    def serve(conn: socket.socket, stop: threading.Event) -> None:
        read_request(conn)
        conn.sendall(raw)
        conn.close()
    return serve


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 2|0 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 2" + b"|\xe6\xa8\xa1" * 300 + b" OK\r\nContent-Length: 0\r\n\r\n",
], ids=["a pipe in the status line", "a long status line"])
@pytest.mark.parametrize("env", list(ENVS.values()), ids=list(ENVS))
def test_malformed_status_line_is_quoted_cleanly(check, raw, env):
    """What the HTTP client says about a broken answer quotes the server's bytes: cleaned too."""
    with RawServer(_status_line(raw)) as srv:
        r = check("-u", srv.url, *FAST, env=env)
        status = clean_output(r, env)
        # an answer that is not HTTP is protocol (UNKNOWN, never restarted), no longer unresponsive (issue 22)
        assert r.word == "protocol" and "status line" in status, r.out
