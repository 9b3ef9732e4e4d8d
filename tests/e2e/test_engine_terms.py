"""Each engine judged on its own terms (issue 45), the installed check end to end on loopback: llama.cpp's and
SGLang's metrics off (their default), SGLang's empty restricted page, SGLang paused on purpose, llama.cpp asleep,
llama.cpp's 6-digit counters, and SGLang's page after a restart. Each of these was a false restart, a missed hang or
a wasted probe before."""

from __future__ import annotations

import json
import time

from check_vllm.contract.vocab import CRITICAL, OK, WARNING
from tests.rig.pages import LLAMA_CPP, METRICS_OFF, PageServer, llamacpp_page
from tests.rig.scripts import FAST
from vllm_simulator import Simulator
from vllm_simulator.sglang_engine import SglangOptions

OPTIONS = SglangOptions(health_poll_seconds=0.05, health_check_timeout=0.4, idle_log_seconds=30.0)


def _posts(srv: PageServer) -> list[tuple[str, str]]:
    return [entry for entry in srv.log if entry[0] == "POST"]


def test_llamacpp_metrics_off_is_no_metrics_naming_the_flag_never_restartable(run_check):
    """llama-server without --metrics answers 501: the server serves (/v1/models), so `no metrics` WARNING that
    names the flag, run after run; before, a 501 was `unresponsive`, proven over time, CRITICAL and restarted."""
    with PageServer("") as srv:
        srv.metrics_off = METRICS_OFF
        runs = [run_check("-u", srv.url, *FAST, "--stuck-seconds", "1", "--stuck-readings", "2") for _ in range(3)]
        for r in runs:
            time.sleep(0.6)
            assert (r.code, r.word) == (WARNING, "no metrics"), r.out
            assert r.first.startswith("LLAMACPP WARNING - no metrics: /metrics answered HTTP 501 (llama.cpp serves "
                                      "it only with --metrics)"), r.out
            assert "/v1/models lists tiny-llama" in r.status, r.out
        assert _posts(srv) == []


def test_sglang_metrics_off_404_names_its_flag_with_engine_sglang(run_check):
    with PageServer("") as srv:
        srv.metrics_off = (404, b'{"detail":"Not Found"}')
        r = run_check("-u", srv.url, "--engine", "sglang", *FAST)
        assert (r.code, r.word) == (WARNING, "no metrics"), r.out
        assert r.first.startswith("SGLANG WARNING - no metrics: /metrics answered HTTP 404 (SGLang serves it only "
                                  "with --enable-metrics)"), r.out


def test_an_empty_page_is_never_a_reading_for_any_engine(run_check):
    """SGLang's restricted page is empty by construction; with --engine sglang that empty page was an idle
    reading, so a hung SGLang was never stuck. An empty page is no reading, whichever engine is named."""
    for engine in ("sglang", "vllm", "llamacpp", "auto"):
        with PageServer("") as srv:
            r = run_check("-u", srv.url, "--engine", engine, *FAST)
            assert (r.code, r.word) == (WARNING, "no metrics"), (engine, r.out)
            assert _posts(srv) == [], engine


def test_sglangs_restricted_page_is_never_asked_once_a_page_said_sglang():
    """The simulator renders it as SGLang does (prometheus_client multiprocess mode: empty), and the check asks
    the whole page from the second run on."""
    sim = Simulator(port=0, flavour="sglang", sglang=OPTIONS, scenario="busy").start()
    try:
        from check_vllm.contract.engines import SGLANG
        from check_vllm.server.reading import restrictable

        assert sim.metrics_text() and not SGLANG.routes.metrics_filter
        import httpx

        names = "&".join(f"name[]={n}" for n in sorted(restrictable(SGLANG)))
        assert httpx.get(f"{sim.url}/metrics/?{names}", timeout=5).text == ""
    finally:
        sim.stop()


def test_sglang_idle_engine_asks_only_the_whole_page_after_the_first_run(run_check):
    sim = Simulator(port=0, flavour="sglang", sglang=OPTIONS, scenario="busy").start()
    try:
        run_check("-u", sim.url, *FAST)
        sim.clear_requests()
        time.sleep(0.4)
        r = run_check("-u", sim.url, *FAST)
        assert r.word == "busy", r.out
        metrics = [q.path for q in sim.requests() if q.path.startswith("/metrics")]
        assert metrics and all("name" not in p for p in metrics), metrics
    finally:
        sim.stop()


def test_sglang_paused_for_a_weight_update_is_paused_not_stuck(run_check):
    """POST /pause_generation: new requests are held, /ready answers 503, /ping 200. The probe goes unanswered and
    nothing moves, which was proven stuck; its server's own word makes it `paused`, never restartable."""
    import httpx

    sim = Simulator(port=0, flavour="sglang", sglang=OPTIONS, scenario="idle").start()
    try:
        args = ("-u", sim.url, *FAST, "--stuck-seconds", "1", "--stuck-readings", "2", "--probe-timeout", "0.5")
        assert run_check(*args).word == "idle"
        assert httpx.post(f"{sim.url}/pause_generation", json={"mode": "in_place"}, timeout=5).status_code == 200
        assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 503
        words = []
        for _ in range(4):
            time.sleep(0.6)
            r = run_check(*args)
            words.append((r.code, r.word, r.status))
        assert all(w[1] == "paused" and w[0] == OK for w in words[1:]), words
        assert "GET /ready" in words[-1][2], words
        httpx.post(f"{sim.url}/continue_generation", json={}, timeout=5)
        time.sleep(0.3)
        assert run_check(*args).word == "idle"
    finally:
        sim.stop()


def test_sglang_unhealthy_ready_503_is_no_pause(run_check):
    """/ready is 503 after a failed health check too; /ping says the server is not healthy: that is no pause."""
    import httpx

    from check_vllm.contract.engines import SGLANG
    from check_vllm.contract.values import PAUSE_UNKNOWN, PAUSED_NO, PAUSED_YES
    from check_vllm.server import held
    from check_vllm.server.fetch import Endpoint

    sim = Simulator(port=0, flavour="sglang", sglang=OPTIONS, scenario="idle").start()
    try:
        with httpx.Client() as client:
            ep = Endpoint(sim.url)
            assert held.is_paused(client, ep, SGLANG.routes, 5) == PAUSED_NO
            httpx.post(f"{sim.url}/pause_generation", json={}, timeout=5)
            assert held.is_paused(client, ep, SGLANG.routes, 5) == PAUSED_YES
            httpx.post(f"{sim.url}/continue_generation", json={}, timeout=5)
            sim.set_scenario("hung_idle")
            assert httpx.get(f"{sim.url}/health", timeout=5).status_code == 503  # its own health check fails
            assert httpx.get(f"{sim.url}/ready", timeout=5).status_code == 503
            assert held.is_paused(client, ep, SGLANG.routes, 5) == PAUSE_UNKNOWN
    finally:
        sim.stop()


def test_llamacpp_asleep_is_never_woken(run_check):
    """While asleep llama.cpp answers /metrics and /props from a cache and says `is_sleeping`: the check reads
    it idle and sends no completion (before, every run sent one, woke it and reloaded the model)."""
    with PageServer(llamacpp_page("idle")) as srv:
        srv.headers = {"Process-Start-Time-Unix": "17620682383"}
        srv.props = {"is_sleeping": True, "total_slots": 2}
        for _ in range(3):
            r = run_check("-u", srv.url, *FAST)
            time.sleep(0.6)  # past --min-gap: each run judges afresh
            assert (r.code, r.word) == (OK, "idle") and "asleep" in r.status, r.out
            assert r.first.startswith("LLAMACPP OK - idle: asleep"), r.out
        assert _posts(srv) == [], srv.log
        assert ("GET", "/slots") not in srv.log
        srv.props = {"is_sleeping": False}
        r = run_check("-u", srv.url, *FAST)
        assert r.status.startswith("idle: probe answered"), r.out
        assert len(_posts(srv)) == 1


def _rounded(page: str, decodes: str, prompt: str) -> str:
    """A llama.cpp page of a long-lived server: counters printed as a C++ stream prints a double (6 digits)."""
    out = []
    for line in page.splitlines():
        if line.startswith("llamacpp:n_decode_total "):
            line = f"llamacpp:n_decode_total {decodes}"
        elif line.startswith("llamacpp:prompt_tokens_total "):
            line = f"llamacpp:prompt_tokens_total {prompt}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_llamacpp_rounded_counters_never_prove_a_stall(run_check):
    """From 10**6 on a printed step of n_decode_total is many decodes: two equal readings of a busy server prove
    nothing. Before, a busy server with a long history was stalling, then stuck."""
    busy = llamacpp_page("busy-1")
    page = _rounded(busy, "1.23457e+09", "4.56789e+10")
    with PageServer(page) as srv:
        srv.headers = {"Process-Start-Time-Unix": "17620682383"}
        args = ("-u", srv.url, *FAST, "--stuck-seconds", "1", "--stuck-readings", "2")
        runs = []
        for _ in range(4):
            runs.append(run_check(*args))
            time.sleep(0.6)
        for r in runs[1:]:
            assert (r.code, r.word) == (OK, "busy"), r.out
            assert "progress cannot be told (steps 1.23457e+09, prompt_tokens 4.56789e+10 printed with 6 " \
                   "significant digits)" in r.status, r.out
        assert _posts(srv) == []


def test_llamacpp_exact_counters_below_a_million_still_prove_a_stall(run_check):
    """The rule drops only what the print could round: an exact page's stall is still proven."""
    page = _rounded(llamacpp_page("busy-1"), "999999", "14")
    with PageServer(page) as srv:
        srv.headers = {"Process-Start-Time-Unix": "17620682383"}
        args = ("-u", srv.url, *FAST, "--stuck-seconds", "1", "--stuck-readings", "2")
        words = []
        for _ in range(5):
            words.append(run_check(*args).word)
            time.sleep(0.6)
        assert words[-1] == "stuck", words


def _slots(decoded: int) -> list[dict]:
    """The real /slots of two busy slots (tests/fixtures/real/llamacpp/slots.json), their decodes set to `decoded`."""
    doc = json.loads((LLAMA_CPP / "slots.json").read_text())
    for i, slot in enumerate(doc):
        slot["next_token"][0]["n_decoded"] = decoded + i
    return doc


def test_llamacpp_rounded_counters_are_read_through_the_slots_exact_counts(run_check):
    """Where the page rounds, /slots (exact, asked only with work present) tells: moving slots are busy, frozen
    ones are proven stuck as any stall, so a long-lived llama.cpp keeps its hang detection."""
    page = _rounded(llamacpp_page("busy-1"), "1.23457e+09", "4.56789e+10")
    with PageServer(page) as srv:
        srv.headers = {"Process-Start-Time-Unix": "17620682383"}
        args = ("-u", srv.url, *FAST, "--stuck-seconds", "1", "--stuck-readings", "2")
        seen = []
        for n in range(3):
            srv.slots = _slots(10_000 + 7 * n)
            seen.append(run_check(*args))
            time.sleep(0.6)
        assert [r.word for r in seen[1:]] == ["busy", "busy"], [r.first for r in seen]
        assert "progress cannot be told" not in seen[-1].status, seen[-1].out
        for _ in range(4):  # the decode loop stops: /metrics and /slots answer, nothing moves
            seen.append(run_check(*args))
            time.sleep(0.6)
        assert seen[-1].word == "stuck" and seen[-1].code == CRITICAL, [r.first for r in seen]
        assert ("GET", "/slots") in srv.log and _posts(srv) == []


def test_sglang_restart_whose_counters_are_gone_is_restarted(run_check):
    """A restarted SGLang (multiprocess mode) shows a counter only once used: with --skip-server-warmup its page has
    none at all. Before, that read `idle` and the restart went unsaid."""
    options = SglangOptions(health_poll_seconds=0.05, health_check_timeout=0.4, idle_log_seconds=30.0,
                            skip_server_warmup=True)
    sim = Simulator(port=0, flavour="sglang", sglang=options, scenario="busy").start()
    try:
        time.sleep(0.4)
        run_check("-u", sim.url, *FAST)
        sim.set_scenario("idle")
        time.sleep(0.4)
        run_check("-u", sim.url, *FAST)
        sim.restart()
        time.sleep(0.3)
        r = run_check("-u", sim.url, *FAST)
        assert (r.code, r.word) == (OK, "restarted"), r.out
        assert "counters are gone" in r.status, r.out
    finally:
        sim.stop()
