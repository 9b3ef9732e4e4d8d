"""Bad /metrics pages, end to end: the installed check against a loopback server that serves them.

Each case runs the check twice with the most trigger-happy settings (one comparison without progress
is stuck), so a data problem that could pass for a stall shows up as CRITICAL "stuck" and fails.
The page source is the simulator's busy page, edited: its counters really move, so the honest
answer is always "busy" or a WARNING that names what is wrong with the page.
"""

from __future__ import annotations

import gzip
import random
import re
import time
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from vllm_simulator import Simulator

from .conftest import (
    CRITICAL,
    FAST,
    OK,
    WARNING,
    Answer,
    Loopback,
    answer,
    gzip_bomb,
    metrics_from,
    sim_page,
)

TRIGGER_HAPPY = ("--stuck-readings", "1", "--stuck-seconds", "0", *FAST)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?( .*)$")


# --------------------------------------------------------------------------- page edits


def drop(*families: str) -> Callable[[str], str]:
    """Remove every sample (and # line) of the named families: exact names, suffixes included."""
    suffixes = ("", "_total", "_created", "_count", "_sum", "_bucket")
    names = {f + s for f in families for s in suffixes}

    def edit(text: str) -> str:
        out = []
        for line in text.splitlines():
            m = SAMPLE.match(line)
            if m and m.group(1) in names:
                continue
            if line.startswith("#") and len(line.split()) > 2 and line.split()[2] in names:
                continue
            out.append(line)
        return "\n".join(out) + "\n"
    return edit


def set_value(name: str, value: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        return "\n".join(
            f"{m.group(1)}{m.group(2) or ''} {value}" if (m := SAMPLE.match(line)) and m.group(1) == name else line
            for line in text.splitlines()
        ) + "\n"
    return edit


def reverse_labels(text: str) -> str:
    def flip(m: re.Match[str]) -> str:
        labels = re.findall(r'[a-zA-Z_]+="[^"]*"', m.group(0))
        return "{" + ",".join(reversed(labels)) + "}"
    return "\n".join(re.sub(r"\{[^}]*\}", flip, line) if not line.startswith("#") else line
                     for line in text.splitlines()) + "\n"


def extra_labels_and_families(text: str) -> str:
    text = re.sub(r'(?m)^(vllm:[^{ ]+)\{', r'\1{zone="eu-1",', text)
    return text + (
        "# HELP vllm:future_metric_total Something a newer vLLM counts.\n"
        "# TYPE vllm:future_metric_total counter\n"
        'vllm:future_metric_total{engine="0",kind="x"} 7.0\n'
        'other_exporter_up{job="x"} 1\n'
        "# TYPE vllm:future_info info\n"
        'vllm:future_info{version="9.9"} 1\n'
    )


def duplicate_series(text: str) -> str:
    wanted = [line for line in text.splitlines() if line.startswith(("vllm:num_requests", "vllm:generation_tokens_total"))]
    return text + "\n".join(wanted) + "\n"


def openmetrics(text: str) -> str:
    """OpenMetrics flavour: exemplars on counter and bucket samples, # UNIT lines, a final # EOF."""
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:") and ("_total{" in line or "_bucket{" in line or "_count{" in line):
            line += ' # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 1.0 1700000000.123'
        out.append(line)
        if line.startswith("# TYPE vllm:time_to_first_token_seconds"):
            out.append("# UNIT vllm:time_to_first_token_seconds seconds")
    return "\n".join(out) + "\n# EOF\n"


def latin1_label(text: str) -> str:
    return text.replace('model_name="tiny-llama"', 'model_name="caf\udce9"')  # a lone 0xE9 byte on the wire


def cut_in(name: str, keep: int) -> Callable[[str], str]:
    """End the page `keep` characters into the first line of sample `name`: a body cut mid-line."""
    def edit(text: str) -> str:
        at = text.index("\n" + name) + 1
        return text[: at + keep]
    return edit


def legacy_011(text: str) -> str:
    """vLLM 0.10-0.11: current names and engine label, but no sleep gauge yet."""
    return drop("vllm:engine_sleep_state")(text)


# --------------------------------------------------------------------------- the matrix

PROGRESS_FAMILIES = ("vllm:iteration_tokens_total", "vllm:generation_tokens", "vllm:prompt_tokens",
                     "vllm:request_success", "vllm:kv_cache_usage_perc")
OTHER_FAMILIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_preemptions",
                  "vllm:engine_sleep_state", "process_start_time_seconds")

# (id, page edit, expected (code, word) on every run, words the status must contain)
BUSY_EDITS: list[tuple[str, Callable[[str], str] | None, str]] = [
    ("current names", None, "running"),
    ("vllm 0.10-0.11 (no sleep gauge)", legacy_011, "tok/s"),
    ("labels in any order", reverse_labels, "tok/s"),
    ("extra unknown families and labels", extra_labels_and_families, "tok/s"),
    ("duplicate series", duplicate_series, "running"),
    ("exemplars and OpenMetrics", openmetrics, "tok/s"),
    ("non-UTF-8 label value", latin1_label, "running"),
    ("NaN counter", set_value("vllm:generation_tokens_total", "NaN"), "running"),
    ("+Inf counter", set_value("vllm:iteration_tokens_total_count", "+Inf"), "running"),
    ("NaN gauge", set_value("vllm:num_requests_running", "NaN"), "0 running, 3 waiting"),
    ("-Inf gauge", set_value("vllm:num_requests_waiting", "-Inf"), "2 running, 0 waiting"),
    ("negative gauge", set_value("vllm:num_requests_waiting", "-4"), "2 running, 0 waiting"),
    ("negative counter", set_value("vllm:prompt_tokens_total", "-12.5"), "running"),
    ("huge gauge", set_value("vllm:num_requests_running", "1e308"), "0 running, 3 waiting"),
    ("huge counter", set_value("vllm:generation_tokens_total", "1.7976931348623157e308"), "running"),
    ("body cut mid-line, counter value half sent", cut_in("vllm:request_success_total", 60), "running"),
    *[(f"missing {f}", drop(f), "running") for f in (*PROGRESS_FAMILIES, *OTHER_FAMILIES)],
]


@pytest.mark.parametrize("edit,must_say", [(e, s) for _, e, s in BUSY_EDITS], ids=[i for i, _, _ in BUSY_EDITS])
def test_busy_page_variants_stay_busy(check, edit, must_say):
    with Simulator(scenario="busy") as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim, edit))}) as srv:
        for _ in range(2):
            r = check("-u", srv.url, *TRIGGER_HAPPY)
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert must_say in r.status, r.out
            time.sleep(0.4)
        assert not [p for p in srv.paths() if "completions" in p], "a busy server was sent a completion"


def test_legacy_v0_names(check):
    """vLLM 0.6-0.9 (V0): gpu_cache_usage_perc, no engine label."""
    with Simulator(scenario="busy", legacy=True) as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim))}) as srv:
        for _ in range(2):
            r = check("-u", srv.url, *TRIGGER_HAPPY)
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert r.perf["kv_cache_usage"] not in ("U", "0")
            time.sleep(0.4)


def test_data_parallel_8_engines(check):
    with Simulator(scenario="busy", engines=8) as sim, Loopback({"GET /metrics": metrics_from(sim_page(sim))}) as srv:
        for _ in range(2):
            r = check("-u", srv.url, *TRIGGER_HAPPY)
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert r.perf["running"] == "16"
            time.sleep(0.4)


# Pages that are not (usable) vLLM metrics: WARNING "no metrics" with /v1/models answering, and the
# status names what was wrong with the page.
def _garbage() -> bytes:
    rng = random.Random(3)
    return bytes(rng.randrange(256) for _ in range(8192))


NOT_METRICS: list[tuple[str, Callable[[BaseHTTPRequestHandler], Answer], str]] = [
    ("HTML with status 200", lambda h: answer(200, "<html><body><h1>Welcome to nginx!</h1></body></html>",
                                              "text/html"), "text/html"),
    ("empty body", lambda h: answer(200, b""), "0 bytes"),
    ("binary garbage", lambda h: answer(200, _garbage(), "application/octet-stream"), "no vllm: metrics"),
    ("UTF-16 page", lambda h: answer(200, 'vllm:num_requests_running{engine="0"} 1.0\n'.encode("utf-16")),
     "no vllm: metrics"),
    ("prometheus page of another program", lambda h: answer(200, "# TYPE up gauge\nup 1\nnode_load1 0.5\n"),
     "no vllm: metrics"),
    ("vllm names with unparseable values", lambda h: answer(200, 'vllm:num_requests_running{engine="0"} many\n'),
     "unparseable"),
    ("gauges but no progress counter", lambda h: answer(
        200, 'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_waiting{engine="0"} 1\n'),
     "progress"),
    ("counters but no work gauge", lambda h: answer(200, 'vllm:generation_tokens_total{engine="0"} 2\n'),
     "num_requests"),
    ("/metrics 404", lambda h: answer(404, '{"detail":"Not Found"}', "application/json"), "HTTP 404"),
    ("/metrics 401", lambda h: answer(401, '{"error":"unauthorized"}', "application/json"), "HTTP 401"),
    ("/metrics 403", lambda h: answer(403, "forbidden"), "HTTP 403"),
]


@pytest.mark.parametrize("route,must_say", [(r, s) for _, r, s in NOT_METRICS], ids=[i for i, _, _ in NOT_METRICS])
def test_not_metrics_is_a_warning_that_says_why(check, route, must_say):
    with Loopback({"GET /metrics": route}) as srv:
        for _ in range(2):
            r = check("-u", srv.url, *TRIGGER_HAPPY)
            assert (r.code, r.word) == (WARNING, "no metrics"), r.out
            assert must_say in r.status and "/v1/models lists tiny-llama" in r.status, r.out
        assert "POST /v1/completions" not in srv.paths()


def test_not_metrics_and_models_failing_is_critical(check):
    with Loopback({"GET /metrics": lambda h: answer(200, "<html/>", "text/html"),
                   "GET /v1/models": lambda h: answer(503, "down for maintenance")}) as srv:
        r = check("-u", srv.url, *TRIGGER_HAPPY)
        assert (r.code, r.word) == (CRITICAL, "no metrics"), r.out
        assert "/v1/models failed" in r.status


def test_gauges_only_after_a_good_reading_is_no_false_stuck(check):
    """A page that loses its counters (a truncated or broken exporter) after a good baseline."""
    with Simulator(scenario="busy") as sim:
        pages = [sim_page(sim), sim_page(sim, drop(*PROGRESS_FAMILIES))]
        which = [0]
        with Loopback({"GET /metrics": lambda h: answer(200, pages[which[0]]())}) as srv:
            assert check("-u", srv.url, *TRIGGER_HAPPY).word == "busy"
            which[0] = 1
            for _ in range(2):
                time.sleep(0.4)
                r = check("-u", srv.url, *TRIGGER_HAPPY)
                assert (r.code, r.word) == (WARNING, "no metrics"), r.out


def _stream(total: int, line: bytes, length: bool) -> Callable[[BaseHTTPRequestHandler], None]:
    def route(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; version=0.0.4")
        if length:
            h.send_header("Content-Length", str(total))
        h.end_headers()
        block = line * (65536 // len(line))
        sent = 0
        try:
            while sent < total:
                h.wfile.write(block)
                sent += len(block)
        except OSError:
            pass  # the check hung up: exactly what it should do
    return route


@pytest.mark.parametrize("length", [True, False], ids=["with Content-Length", "close-delimited"])
def test_50_mb_page_is_capped(check, length):
    line = b'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 1.0\n'
    with Loopback({"GET /metrics": _stream(50 << 20, line, length)}) as srv:
        r = check("-u", srv.url, *TRIGGER_HAPPY)
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert "more than 8192 KiB; stopped reading" in r.status  # the cap is in bytes: no clock to read


def test_gzip_bomb_is_capped_on_decoded_size(check):
    bomb = gzip_bomb(200 << 20)
    with Loopback({"GET /metrics": lambda h: answer(200, bomb, "text/plain", Content_Encoding="gzip")}) as srv:
        r = check("-u", srv.url, *TRIGGER_HAPPY)
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert "stopped reading" in r.status


def test_body_shorter_than_its_content_length(check):
    """The connection drops mid-line: the exchange failed, the check says so (not a verdict on data)."""
    def route(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", "50000")
        h.end_headers()
        h.wfile.write(b'vllm:num_requests_running{engine="0"} 2.0\nvllm:num_requests_wai')
    with Loopback({"GET /metrics": route}) as srv:
        for _ in range(2):
            r = check("-u", srv.url, *FAST)
            assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
            assert "GET /metrics" in r.status and "without sending complete message body" in r.status, r.out


@pytest.mark.parametrize("wbits", [31, 15], ids=["gzip", "deflate"])
def test_compressed_page_is_read(check, wbits):
    def route(h: BaseHTTPRequestHandler) -> Answer:
        z = zlib.compressobj(6, zlib.DEFLATED, wbits)
        body = z.compress(page()) + z.flush()
        return answer(200, body, "text/plain; version=0.0.4", Content_Encoding="gzip" if wbits == 31 else "deflate")

    with Simulator(scenario="busy") as sim, Loopback({"GET /metrics": route}) as srv:
        page = sim_page(sim)
        for _ in range(2):
            r = check("-u", srv.url, *TRIGGER_HAPPY)
            assert (r.code, r.word) == (OK, "busy"), r.out
            time.sleep(0.4)


def test_unasked_content_encoding_is_named(check):
    with Loopback({"GET /metrics": lambda h: answer(200, b"\x28\xb5\x2f\xfd", "text/plain",
                                                    Content_Encoding="zstd")}) as srv:
        r = check("-u", srv.url, *FAST)
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert "Content-Encoding 'zstd'" in r.status, r.out


# --------------------------------------------------------------------------- a compressed page cut short
# A gzip stream cut inside a correctly framed body is half a page: it proves nothing, and must not be
# judged as a reading.


def _page(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data, 6)  # Content-Encoding: deflate is the zlib container


def _serve(pages: list[tuple[bytes, str]]) -> Callable[[BaseHTTPRequestHandler], Answer]:
    """/metrics answers the listed bodies in turn (the last one from then on), each with its
    Content-Encoding and a Content-Length that matches exactly what is sent."""
    served = [0]

    def route(h: BaseHTTPRequestHandler) -> Answer:
        body, encoding = pages[min(served[0], len(pages) - 1)]
        served[0] += 1
        return answer(200, body, "text/plain; version=0.0.4; charset=utf-8", Content_Encoding=encoding)

    return route


@pytest.fixture
def gz_pages() -> Iterator[tuple[bytes, bytes]]:
    yield gzip.compress(_page("saturated.txt")), gzip.compress(_page("saturated_b.txt"))


CUTS = {  # where the second page is cut: inside the header, in the middle, inside the 8-byte CRC/size trailer
    "in the gzip header": lambda n: 6,
    "after a tenth": lambda n: n // 10,
    "halfway": lambda n: n // 2,
    "nine tenths": lambda n: n * 9 // 10,
    "inside the trailer": lambda n: n - 4,
    "last byte missing": lambda n: n - 1,
}


@pytest.mark.parametrize("cut", list(CUTS.values()), ids=list(CUTS))
def test_cut_gzip_body_is_no_reading(check, gz_pages, cut):
    first, second = gz_pages
    cut_second = second[:cut(len(second))]
    with Loopback({"GET /metrics": _serve([(first, "gzip"), (second, "gzip"), (cut_second, "gzip")])}) as srv:
        r = check("-u", srv.url, *FAST)  # two whole pages (a first reading, then a re-read): busy
        assert (r.code, r.word) == (OK, "busy"), r.out
        for _ in range(2):
            r = check("-u", srv.url, *FAST)
            assert r.code != CRITICAL, r.out
            assert "compressed body that ends early" in r.status, r.out
            assert r.word not in ("busy", "stalling", "stuck", "idle", "restarted"), r.out  # judged as no reading


def test_cut_deflate_body_is_no_reading(check):
    first, second = _deflate(_page("saturated.txt")), _deflate(_page("saturated_b.txt"))
    pages = [(first, "deflate"), (second, "deflate"), (second[: len(second) // 2], "deflate")]
    with Loopback({"GET /metrics": _serve(pages)}) as srv:
        r = check("-u", srv.url, *FAST)
        assert (r.code, r.word) == (OK, "busy"), r.out
        for _ in range(2):
            r = check("-u", srv.url, *FAST)
            assert r.code != CRITICAL and "compressed body that ends early" in r.status, r.out
