"""check_vllm end to end: exact exit code, status word, perfdata syntax, and what the server received."""

from __future__ import annotations

import json
import time

import pytest

from check_vllm.contract.vocab import CRITICAL, OK, UNKNOWN, WARNING  # noqa: E402
from vllm_simulator import Simulator

from .conftest import FAST

LABELS = {"tokens_per_second", "prompt_tokens_per_second", "steps_per_second", "running", "waiting",
          "kv_cache_usage", "stalled_seconds"}


def test_busy_sends_no_inference_request(sim: Simulator, run_check):
    sim.set_scenario("busy")
    first = run_check("-u", sim.url, *FAST)
    assert (first.code, first.word) == (OK, "busy"), first.out
    time.sleep(0.4)
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (OK, "busy"), r.out
    perf = r.perf
    assert LABELS <= set(perf)
    assert "probe_seconds" not in perf
    assert float(perf["tokens_per_second"]) > 0 and perf["running"] == "2" and perf["waiting"] == "3"
    assert sim.inference_requests() == []
    # steady state: exactly one GET of the restricted /metrics/ per run (the first run read twice: no baseline yet)
    assert [(q.method, q.path) for q in sim.requests()] == [("GET", "/metrics/")] * 3


def test_frozen_goes_ok_warning_critical_and_back(sim: Simulator, run_check):
    args = ("-u", sim.url, "--stuck-seconds", "0", *FAST)
    sim.set_scenario("busy")
    assert run_check(*args).word == "busy"
    time.sleep(0.4)
    assert run_check(*args).code == OK
    sim.set_scenario("stuck")
    seen = []
    for _ in range(3):
        time.sleep(0.4)
        r = run_check(*args)
        seen.append((r.code, r.word))
    assert seen == [(OK, "busy"), (WARNING, "stalling"), (CRITICAL, "stuck")], seen
    assert float(r.perf["stalled_seconds"]) > 0
    sim.set_scenario("busy")
    time.sleep(0.4)
    r = run_check(*args)
    assert (r.code, r.word) == (OK, "busy"), r.out
    assert sim.inference_requests() == []


def test_stuck_needs_the_seconds_too(sim: Simulator, run_check):
    sim.set_scenario("stuck")
    words = []
    for _ in range(4):
        words.append(run_check("-u", sim.url, "--stuck-seconds", "120", *FAST).word)
        time.sleep(0.35)
    assert "stuck" not in words and words[-1] == "stalling"


def test_idle_sends_exactly_one_probe(sim: Simulator, run_check):
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (OK, "idle"), r.out
    assert "probe answered" in r.status
    assert float(r.perf["probe_seconds"]) >= 0
    assert [q.path for q in sim.inference_requests()] == ["/v1/completions"]


def test_idle_with_no_probe_sends_nothing(sim: Simulator, run_check):
    r = run_check("-u", sim.url, "--no-probe", *FAST)
    assert (r.code, r.word) == (OK, "idle")
    assert sim.inference_requests() == []


def test_idle_after_our_own_probe_stays_idle(sim: Simulator, run_check):
    for _ in range(3):
        r = run_check("-u", sim.url, *FAST)
        assert (r.code, r.word) == (OK, "idle"), r.out
        time.sleep(0.35)
    assert len(sim.inference_requests()) == 3


def test_long_prefill_is_busy_not_stalling(sim: Simulator, run_check):
    sim.set_scenario("long_prefill")
    for _ in range(3):
        r = run_check("-u", sim.url, "--stuck-seconds", "0", *FAST)
        assert (r.code, r.word) == (OK, "busy"), r.out
        time.sleep(0.35)


def test_restart_becomes_a_new_baseline(sim: Simulator, run_check):
    sim.set_scenario("busy")
    run_check("-u", sim.url, *FAST)
    sim.restart()
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (OK, "restarted"), r.out
    assert r.perf["tokens_per_second"] == "U"  # never a rate across two processes
    assert "ago" in r.status


def test_multiprocess_restart_seen_by_counters_going_back(run_check):
    with Simulator(scenario="multiprocess") as s:
        run_check("-u", s.url, *FAST)
        time.sleep(0.4)
        assert run_check("-u", s.url, *FAST).word == "busy"
        s.restart()
        time.sleep(0.05)
        r = run_check("-u", s.url, *FAST)
        assert r.word == "restarted", r.out
        assert "backwards" in r.status


def test_data_parallel_one_frozen_engine(run_check):
    with Simulator(scenario="dp_one_frozen", engines=2) as s:
        words = []
        for _ in range(3):
            r = run_check("-u", s.url, "--stuck-seconds", "0", *FAST)
            words.append(r.word)
            time.sleep(0.35)
        assert words == ["stalling", "stuck", "stuck"], words
        assert "engine 1" in r.status and "engine 0 busy" in r.status
        assert r.code == CRITICAL


def test_legacy_names(run_check):
    with Simulator(scenario="busy", legacy=True) as s:
        r = run_check("-u", s.url, *FAST)
        assert (r.code, r.word) == (OK, "busy"), r.out
        assert r.perf["kv_cache_usage"] != "U"


def test_sleeping_is_ok_and_not_probed(sim: Simulator, run_check):
    sim.set_scenario("sleeping")
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (OK, "sleeping"), r.out
    assert sim.inference_requests() == []


@pytest.mark.parametrize("scenario,code,word", [
    ("no_metrics", WARNING, "no metrics"),
    ("html", WARNING, "no metrics"),
    ("http_500", WARNING, "unresponsive"),
    ("http_502", WARNING, "unresponsive"),
    ("dead", CRITICAL, "down"),
])
def test_bad_answers(sim: Simulator, run_check, scenario, code, word):
    sim.set_scenario(scenario)
    r = run_check("-u", sim.url, *FAST)
    assert (r.code, r.word) == (code, word), r.out
    assert sim.inference_requests() == []


def test_html_page_says_what_it_got(sim: Simulator, run_check):
    sim.set_scenario("html")
    r = run_check("-u", sim.url, *FAST)
    assert "text/html" in r.status and "/v1/models lists" in r.status


def test_unresponsive_turns_critical(sim: Simulator, run_check):
    sim.set_scenario("http_500")
    codes = []
    for _ in range(3):
        codes.append(run_check("-u", sim.url, "--stuck-seconds", "0", *FAST).code)
    assert codes == [WARNING, CRITICAL, CRITICAL]


def test_slow_metrics_is_unresponsive_within_the_timeout(run_check):
    with Simulator(scenario="slow", slow_seconds=120) as s:  # stopping the simulator lets the held page go
        started = time.monotonic()
        r = run_check("-u", s.url, "-t", "4", *FAST)
        # the bound is the product's own figure: -t 4, the run's whole budget, x5; the page was held 120 s
        assert time.monotonic() - started < 5 * 4
        assert (r.code, r.word) == (WARNING, "unresponsive"), r.out
        assert "/metrics" in r.status


def test_connection_refused_is_critical_not_unknown(run_check):
    r = run_check("-u", "http://127.0.0.1:9", *FAST)
    assert (r.code, r.word) == (CRITICAL, "down")
    assert "connection refused" in r.status


def test_proxy_reads_only_models(sim: Simulator, run_check):
    sim.set_scenario("busy")
    r = run_check("-u", sim.url, "--proxy", *FAST)
    assert (r.code, r.word) == (OK, "proxy"), r.out
    assert [q.path for q in sim.requests()] == ["/v1/models"]
    sim.set_scenario("dead")
    r = run_check("-u", sim.url, "--proxy", *FAST)
    assert (r.code, r.word) == (CRITICAL, "proxy")


def test_thresholds_on_waiting_and_kv(sim: Simulator, run_check):
    sim.set_scenario("busy")
    run_check("-u", sim.url, *FAST)
    time.sleep(0.35)
    r = run_check("-u", sim.url, "-w", "2", "-c", "10", *FAST)
    assert (r.code, r.word) == (WARNING, "busy"), r.out  # 3 waiting > 2
    assert "waiting 3 outside range 0:2" in r.status
    time.sleep(0.35)
    r = run_check("-u", sim.url, "--kv-critical", "0:1", *FAST)
    assert r.code == CRITICAL and r.word == "busy"
    assert r.first.split(" | ")[1].count("waiting=3;") == 1


def test_api_key_is_sent_but_never_shown(sim: Simulator, run_check, tmp_path):
    secret = "sk-very-secret-123"
    r = run_check("-u", sim.url, "-v", *FAST, env={"VLLM_API_KEY": secret})
    assert r.word == "idle"
    for path in (tmp_path / "state").iterdir():
        assert secret not in path.read_text(errors="replace")
    assert secret not in r.out and secret not in r.err
    keyfile = tmp_path / "key"
    keyfile.write_text(secret + "\n")
    r = run_check("-u", sim.url, "--api-key-file", str(keyfile), *FAST)
    assert secret not in r.out


@pytest.mark.parametrize("args", [
    ("--bogus",), ("-u", "ftp://x"), ("-u", "not a url"), ("--stuck-readings", "0"),
    ("--stuck-seconds", "-1"), ("-w", "abc"), ("--timeout", "nan"), ("--api-key-file", "/nonexistent/key"),
    ("-h",), ("--help",), ("-V",), ("--version",),
])
def test_usage_help_and_version_exit_3(run_check, args):
    r = run_check(*args)
    assert r.code == UNKNOWN, r.out
    if args[0] in ("-V", "--version"):
        assert r.out.startswith("check_vllm ")
    elif args[0] not in ("-h", "--help"):
        assert r.first.startswith("VLLM UNKNOWN - usage:"), r.out


def test_help_lists_every_perfdata_label(run_check):
    out = run_check("--help").out
    for label in LABELS | {"probe_seconds"}:
        assert label in out


def test_state_file_is_private_and_versioned(sim: Simulator, run_check, tmp_path):
    run_check("-u", sim.url, *FAST)
    files = [p for p in (tmp_path / "state").iterdir() if p.suffix == ".json"]
    assert len(files) == 1
    assert files[0].stat().st_mode & 0o777 == 0o600
    doc = json.loads(files[0].read_text())
    assert doc["format"] == "check_vllm-state" and doc["version"] == 1
    assert doc["data"]["verdict"]["word"] == "idle"


def test_idle_engine_that_never_answers_the_probe_is_stuck_only_after_the_proof(sim: Simulator, run_check):
    """Issue 12: the first unanswered probe is a WARNING; CRITICAL needs --stuck-readings readings too."""
    sim.set_scenario("hung_idle")  # metrics say idle (a frozen engine reports nothing new), completions hang
    first = run_check("-u", sim.url, "--probe-timeout", "1.5", "--stuck-seconds", "0", *FAST)
    assert (first.code, first.word) == (WARNING, "stalling"), first.out
    assert "probe got no answer" in first.status or "probe went unanswered" in first.status, first.out
    assert len(sim.inference_requests()) == 1  # one probe, and only because the engine looked idle
    time.sleep(0.6)
    second = run_check("-u", sim.url, "--probe-timeout", "1.5", "--stuck-seconds", "0", *FAST)
    assert (second.code, second.word) == (CRITICAL, "stuck"), second.out


def test_a_no_probe_service_sharing_the_state_does_not_hide_a_hung_engine(sim: Simulator, run_check):
    """Issue 22 item 8: a --no-probe run just under --min-gap before the probing one must not make it repeat idle."""
    sim.set_scenario("hung_idle")
    gap = ("--min-gap", "2", "--reread-delay", "0.4", "--probe-timeout", "1", "--stuck-seconds", "0")
    run_check("-u", sim.url, "--no-probe", *gap)  # the first reading of both
    time.sleep(2.1)
    words = []
    for _ in range(2):
        quiet = run_check("-u", sim.url, "--no-probe", *gap)
        time.sleep(1.1)
        probing = run_check("-u", sim.url, *gap)
        assert "repeated" not in probing.status, probing.out
        words.append((quiet.word, probing.word))
        time.sleep(2.1)
    assert words[0][1] == "stalling" and words[1] == ("stalling", "stuck"), words
    assert len(sim.inference_requests()) == 2
