"""llama.cpp's router mode (issue 45, point 7), the installed check end to end against a loopback stand-in router:
`llama-server --models-dir DIR` runs a process per model, started on demand. Its /metrics answers 400 "model name
is missing from the request" without `?model=`, and a request naming a model not loaded LOADS it unless it carries
`autoload=false` (tools/server/server-models.cpp, b11434: router_validate_model, is_autoload). So the check reads each
loaded model's page as one engine of the server (as data-parallel engines are), and never makes it load a model.

The stand-in answers as the real router does (its words and shapes recorded in tests/real_llamacpp/
test_router_real.py against the real one), serves real llama.cpp pages (tests/fixtures/real/llamacpp/) per model with
that model's Process-Start-Time-Unix header, and records every request. It LOADS a model a request names without
`autoload=false`, as the real router would: the tests assert it never had to.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.pages import COMPLETION, llamacpp_page

#: What the router (b11434) answers, as format_error_response shapes it: HTTP 400 invalid_request_error.
UNNAMED = "model name is missing from the request"
NOT_LOADED = "model is not loaded"
#: Each model's process start (llama.cpp's Process-Start-Time-Unix: ggml_time_us() at start), one per child.
STARTS = {"alpha": "17628360700", "beta": "17620682383", "gamma": "17699999999"}
#: --min-gap 0 and --stuck-seconds 0: readings alone decide; the re-read of a first reading comes at once.
ARGS = ("--min-gap", "0", "--reread-delay", "0", "--stuck-seconds", "0", "--stuck-readings", "2", "-v")


def decoded(name: str, steps: int) -> str:
    """A recorded page with its decode counter at `steps` (a busy model's next page)."""
    return re.sub(r"(?m)^llamacpp:n_decode_total \S+$", f"llamacpp:n_decode_total {steps}", llamacpp_page(name))


class Router(ThreadingHTTPServer):
    """The router: `states` is each model's status.value in listing order; `pages` each loaded model's /metrics in
    order (the last repeats); `log` every request as (method, path with query, the body's model or None)."""

    daemon_threads = True

    def __init__(self, states: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.states = dict(states)
        self.pages: dict[str, list[str]] = {name: [llamacpp_page("idle")] for name in states}
        self.log: list[tuple[str, str, str | None]] = []
        #: Models loaded because a request named them without autoload=false (the real router's autoload).
        self.autoloaded: list[str] = []
        #: A model's /metrics answered with this status instead (its process gone: the proxy fails).
        self.errors: dict[str, int] = {}
        #: What the listing answers instead of the models' states.
        self.listing: object = None
        #: Each model's process start (a model reloaded is a new child process).
        self.starts = dict(STARTS)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def hand_out(self, **pages: list[str] | str) -> None:
        for name, seq in pages.items():
            self.pages[name] = [seq] if isinstance(seq, str) else list(seq)

    def named(self) -> list[str]:
        """Every model a request named (a query's model=, a body's "model")."""
        out = []
        for _, path, body in self.log:
            out += parse_qs(urlsplit(path).query).get("model", [])
            out += [body] if body else []
        return out

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Router

    def _model(self, name: str | None, autoload: bool) -> str | None:
        """router_validate_model: the error of a request for `name`, None when it goes through (loading it first
        when autoload and it is not loaded)."""
        if not name:
            return UNNAMED
        if name not in self.server.states:
            return f"model '{name}' not found"
        if self.server.states[name] not in ("loaded", "sleeping", "loading"):
            if not autoload:
                return NOT_LOADED
            self.server.autoloaded.append(name)
            self.server.states[name] = "loaded"
        return None

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        self.server.log.append(("GET", self.path, None))
        autoload = query.get("autoload", ["true"])[0] in ("true", "1")
        model = query.get("model", [""])[0]
        if split.path in ("/v1/models", "/models"):
            data = [{"id": n, "object": "model", "owned_by": "llamacpp", "status": {"value": s, "args": []}}
                    for n, s in self.server.states.items()]
            return self._json(200, self.server.listing or {"data": data, "object": "list"})
        if split.path == "/props" and not model:
            return self._json(200, {"role": "router", "max_instances": 4, "models_autoload": True})
        if split.path not in ("/metrics", "/props"):
            return self._json(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})
        error = self._model(model, autoload)
        if error:
            return self._json(400, {"error": {"code": 400, "message": error, "type": "invalid_request_error"}})
        if split.path == "/props":
            return self._json(200, {"is_sleeping": self.server.states[model] == "sleeping"})
        if model in self.server.errors:
            return self._json(self.server.errors[model], {"error": {"code": 500, "message": "proxy error"}})
        pages = self.server.pages[model]
        body = (pages.pop(0) if len(pages) > 1 else pages[0]).encode()
        self._send(200, body, "text/plain; version=0.0.4", {"Process-Start-Time-Unix": self.server.starts[model]})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            model = json.loads(raw).get("model")
        except (ValueError, AttributeError):
            model = None
        self.server.log.append(("POST", self.path, model))
        query = parse_qs(urlsplit(self.path).query)
        error = self._model(model, query.get("autoload", ["true"])[0] in ("true", "1"))
        if error:
            return self._json(400, {"error": {"code": 400, "message": error, "type": "invalid_request_error"}})
        self._send(200, COMPLETION, "application/json")

    def _json(self, status: int, doc: object) -> None:
        self._send(status, json.dumps(doc).encode(), "application/json; charset=utf-8")

    def _send(self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _never_loaded_anything(router: Router, unloaded: str = "gamma") -> None:
    """No request named the unloaded model; every read of a model and every probe carried autoload=false."""
    assert router.autoloaded == [], router.log
    assert unloaded not in router.named(), router.log
    for method, path, _ in router.log:
        split = urlsplit(path)
        if method == "POST" or (split.path == "/metrics" and split.query) or split.path == "/props" and split.query:
            assert parse_qs(split.query).get("autoload") == ["false"], (method, path)


def _engines(out: str) -> dict[str, str]:
    """The verbose lines' per-engine words: `engine NAME: word`."""
    return dict(line[len("engine "):].split(": ", 1) for line in out.splitlines()[1:] if line.startswith("engine "))


def test_router_judged_per_loaded_model_a_stalled_one_stuck_while_the_other_is_busy(run_check):
    """Two models loaded, one not: idle (a probe of a loaded model, with autoload=false), busy per model, then one
    model's decode counter frozen with work while the other moves: stalling, then stuck (CRITICAL) naming it."""
    with Router({"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}) as router:

        def run(alpha: list[str], beta: list[str]):
            router.hand_out(alpha=alpha, beta=beta)
            r = run_check("-u", router.url, *ARGS)
            return r

        r = run([llamacpp_page("idle")], [llamacpp_page("idle")])
        assert (r.code, r.word) == (OK, "idle") and r.first.startswith("LLAMACPP OK - idle: probe answered"), r.out
        assert _engines(r.out) == {"alpha": "idle", "beta": "idle"}, r.out
        posts = [(path, model) for method, path, model in router.log if method == "POST"]
        assert posts == [("/v1/completions?autoload=false", "alpha")], router.log
        assert ("GET", "/metrics", None) in router.log, "the router is told by its answer to a bare /metrics"

        r = run([decoded("stall-before", 5000)], [llamacpp_page("busy-1")])
        assert (r.code, r.word) == (OK, "busy"), r.out
        assert _engines(r.out) == {"alpha": "busy", "beta": "busy"}, r.out
        assert r.status.startswith("busy: 4 running, 0 waiting"), r.out
        r = run([llamacpp_page("stalled-1")], [llamacpp_page("busy-2")])
        assert (r.code, r.word) == (OK, "busy"), r.out  # the last decodes before its thread stopped
        r = run([llamacpp_page("stalled-2")], [llamacpp_page("busy-3")])
        assert (r.code, r.word) == (WARNING, "stalling"), r.out
        assert r.first.startswith("LLAMACPP WARNING - stalling: engine alpha with 2 running, 0 waiting: no progress"), \
            r.out
        assert "engine beta busy" in r.status, r.out
        assert _engines(r.out) == {"alpha": "stalling", "beta": "busy"}, r.out
        r = run([llamacpp_page("stalled-2")], [decoded("busy-3", 18000)])
        assert (r.code, r.word) == (CRITICAL, "stuck"), r.out
        assert r.first.startswith("LLAMACPP CRITICAL - stuck: engine alpha with 2 running, 0 waiting: no progress"), \
            r.out
        assert "engine beta busy" in r.status and _engines(r.out) == {"alpha": "stuck", "beta": "busy"}, r.out
        assert [p for m, p, _ in router.log if m == "POST"] == ["/v1/completions?autoload=false"], \
            "no probe while work is in sight"
        _never_loaded_anything(router)
        assert router.states == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}


def test_a_model_loaded_or_unloaded_between_runs_is_no_stall_and_no_restart(run_check):
    """A new model's page has no baseline (nothing to compare: busy, never stalling); a model gone leaves the others'
    comparison alone; neither is a new process of the server."""
    with Router({"alpha": "loaded", "beta": "unloaded", "gamma": "unloaded"}) as router:
        router.hand_out(alpha=[decoded("busy-1", 1000), decoded("busy-1", 2000)])
        assert run_check("-u", router.url, *ARGS).word == "busy"
        router.states["beta"] = "loaded"  # a client's request loaded it
        router.hand_out(alpha=decoded("busy-1", 3000), beta=llamacpp_page("stalled-2"))
        r = run_check("-u", router.url, *ARGS)
        assert (r.code, r.word) == (OK, "busy") and _engines(r.out) == {"alpha": "busy", "beta": "busy"}, r.out
        router.states["alpha"] = "unloaded"  # --models-max made room, or an operator unloaded it
        router.hand_out(beta=decoded("stalled-2", 7000))
        r = run_check("-u", router.url, *ARGS)
        assert (r.code, r.word) == (OK, "busy") and _engines(r.out) == {"beta": "busy"}, r.out
        router.states["alpha"] = "loading"  # its process does not serve yet: not read, not named
        router.hand_out(beta=decoded("stalled-2", 8000))
        r = run_check("-u", router.url, *ARGS)
        assert (r.code, r.word) == (OK, "busy") and _engines(r.out) == {"beta": "busy"}, r.out
        assert not any("model=alpha" in p for _, p, _ in router.log[-4:]), router.log
        router.starts["beta"] = "17700000000"  # beta reloaded between two runs: a new child process, named so
        router.hand_out(beta=llamacpp_page("busy-1"))
        r = run_check("-u", router.url, *ARGS)
        assert (r.code, r.word) == (OK, "restarted") and "counters were re-created" in r.status, r.out
        _never_loaded_anything(router)


def test_no_model_loaded_is_no_metrics_never_critical_and_nothing_is_loaded(run_check):
    """The router answers its listing, and every model is unloaded: `no metrics` (WARNING, not restartable) saying
    so, run after run, no probe, no request naming a model."""
    with Router({"alpha": "unloaded", "beta": "unloaded", "gamma": "unloaded"}) as router:
        for _ in range(3):
            r = run_check("-u", router.url, *ARGS)
            assert (r.code, r.word) == (WARNING, "no metrics"), r.out
            assert r.first.startswith("LLAMACPP WARNING - no metrics: llama.cpp's router has no model loaded "
                                      "(3 unloaded), and the check loads none; /v1/models answers"), r.out
        assert router.named() == [] and not any(m == "POST" for m, _, _ in router.log), router.log
        _never_loaded_anything(router)
        assert set(router.states.values()) == {"unloaded"}


def test_a_sleeping_model_is_read_but_never_probed(run_check):
    """A loaded model asleep (--sleep-idle-seconds) answers its page from a cache; the probe would wake it. Only one
    asleep: its /props (with the model and autoload=false) says so, and it is let sleep."""
    with Router({"alpha": "sleeping", "gamma": "unloaded"}) as router:
        r = run_check("-u", router.url, *ARGS)
        assert (r.code, r.word) == (OK, "idle") and "not probed" in r.status, r.out
        assert ("GET", "/props?model=alpha&autoload=false", None) in router.log, router.log
        assert not any(m == "POST" for m, _, _ in router.log), router.log
        _never_loaded_anything(router)


def test_a_model_whose_page_fails_is_the_servers_trouble_named_by_model(run_check):
    """The router answers 500 for a loaded model's page (its process gone under the proxy): `unresponsive` as any
    read's 5xx (WARNING until it lasts), naming the model; never a false reading of the others alone."""
    with Router({"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}) as router:
        router.errors["beta"] = 500
        r = run_check("-u", router.url, *ARGS)
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        assert "/metrics answered HTTP 500 (model beta)" in r.status, r.out
        _never_loaded_anything(router)


def test_a_listing_without_states_or_garbage_is_no_metrics_never_a_traceback(run_check):
    """A router whose listing names no model's state (or is no listing): `no metrics` (WARNING), nothing loaded."""
    from check_vllm.contract.engines import LLAMA_CPP
    from check_vllm.server.router import listed

    for doc in (None, [], "x", {"data": None}, {"data": [1, None, "a", {"id": 3, "status": {"value": "loaded"}},
                                                       {"id": "a", "status": "loaded"}]}):
        assert listed(doc, LLAMA_CPP) is None, doc
    got = listed({"data": [{"id": "a", "status": {"value": "loaded"}}, {"id": "b", "status": {"value": "weird\n"}},
                           {"id": "c", "status": {"value": "sleeping"}}]}, LLAMA_CPP)
    assert got is not None and (got.serving, got.sleeping, dict(got.others)) == (("a",), ("c",), {"weird": 1})
    for listing in ({"data": [{"id": "alpha"}]}, {"object": "list"}):
        with Router({"alpha": "loaded", "gamma": "unloaded"}) as router:
            router.listing = listing
            r = run_check("-u", router.url, *ARGS)
            assert (r.code, r.word) == (WARNING, "no metrics"), r.out
            assert "without its models' states" in r.status, r.out
            assert router.named() == [], router.log
