"""The agent's verdicts as Prometheus series (issue 55; check_vllm.haproxy.exposition): the page of every verdict,
parsed back with prometheus_client's own parser; unknown values absent; labels cleaned and bounded; the agent's own
health from the judging loop (check_vllm.haproxy.watch)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.contract import vocab
from check_vllm.contract.defaults import OPTIONS, SETTINGS
from check_vllm.contract.kept import Baseline, Memory
from check_vllm.contract.values import Reading
from check_vllm.contract.verdict import Verdict
from check_vllm.contract.vocab import CRITICAL, OK
from check_vllm.haproxy import cli, exposition
from check_vllm.haproxy.exposition import FROM_PERFDATA, IDLE_PERF, IdleCompletion, Named, Scrape, named, render
from check_vllm.haproxy.watch import Watch
from check_vllm.observe import Observation
from check_vllm.server.fetch import Endpoint

URL = "http://127.0.0.1:8000"
SERVER = {"server": URL, "engine": "vllm", "model": "tiny-llama"}
AGENT_SERIES = {"check_vllm_agent_up", "check_vllm_last_judgement_timestamp_seconds",
                "check_vllm_agent_verdict_age_seconds", "check_vllm_agent_stale_after_seconds",
                "check_vllm_agent_judgements_total", "check_vllm_agent_judgement_errors_total"}


def page(scrape: Scrape) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], as Prometheus would read the page."""
    body, content_type = render(scrape)
    assert content_type.startswith("text/plain; version=") and "charset=utf-8" in content_type
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def scrape(verdict: Verdict | None, **kw) -> Scrape:
    base = dict(named=Named("vllm", "tiny-llama"), judged_at=1.8e9, age=1.5, stale_after=30.0, judgements=7)
    return Scrape(URL, verdict, **{**base, **kw})


def one(got: dict, name: str) -> float:
    (labels, value), = got[name]
    return value


@pytest.mark.parametrize(("word", "state"), [(w.word, s) for w in vocab.VERDICTS for s in w.states])
def test_every_verdict_is_one_word_of_a_fixed_set(word, state):
    got = page(scrape(Verdict(word, state, "text", Memory())))
    words = {labels["word"]: value for labels, value in got["check_vllm_verdict"]}
    assert words == {w: float(w == word) for w in vocab.WORDS}  # every word of the contract, always: fixed cardinality
    assert all({k: v for k, v in labels.items() if k != "word"} == SERVER for labels, _ in got["check_vllm_verdict"])
    assert one(got, "check_vllm_state") == state
    assert one(got, "check_vllm_restartable") == float(word in vocab.RESTARTABLE and state == CRITICAL)
    assert one(got, "check_vllm_agent_up") == 1.0
    # nothing the verdict does not carry: no running, no stall, no rate pretending to be a reading of 0
    assert set(got) == AGENT_SERIES | {"check_vllm_verdict", "check_vllm_state", "check_vllm_restartable"}


def test_the_figures_a_verdict_carries_are_its_series_each_with_the_server_s_labels():
    busy = Verdict(vocab.BUSY, OK, "2 running", Memory(), running=2.0, waiting=3.0, kv_cache=41.5,
                   tokens_per_second=812.25, prompt_tokens_per_second=50.0, steps_per_second=31.0, stalled_seconds=0.0)
    got = page(scrape(busy, idle=IdleCompletion(0.125, 1.8e9 - 40)))
    want = {"check_vllm_requests_running": 2.0, "check_vllm_requests_waiting": 3.0,
            "check_vllm_kv_cache_usage_percent": 41.5, "check_vllm_tokens_per_second": 812.25,
            "check_vllm_prompt_tokens_per_second": 50.0, "check_vllm_steps_per_second": 31.0,
            "check_vllm_stalled_seconds": 0.0, "check_vllm_idle_completion_seconds": 0.125,
            "check_vllm_idle_completion_timestamp_seconds": 1.8e9 - 40}
    for name, value in want.items():
        assert got[name] == [(SERVER, value)], name
    assert got["check_vllm_agent_judgements_total"] == [({"server": URL}, 7.0)]
    assert one(got, "check_vllm_last_judgement_timestamp_seconds") == 1.8e9
    assert one(got, "check_vllm_agent_verdict_age_seconds") == 1.5


def test_every_perfdata_row_has_its_series():
    """The perfdata table is the one list of a verdict's figures: a row added there must be named here."""
    assert {p.label for p in vocab.PERFDATA} == set(FROM_PERFDATA) | {IDLE_PERF}
    assert all(name.startswith("check_vllm_") for name in FROM_PERFDATA.values())


def test_no_verdict_leaves_only_the_agent_s_own_series_saying_so():
    first = page(Scrape(URL, stale_after=30.0))  # the agent's first moment: nothing judged yet
    assert set(first) == {"check_vllm_agent_up", "check_vllm_agent_stale_after_seconds",
                          "check_vllm_agent_judgements_total", "check_vllm_agent_judgement_errors_total"}
    assert one(first, "check_vllm_agent_up") == 0.0
    stale = page(scrape(None, age=95.0, errors=3, idle=IdleCompletion(0.1, 1.0)))  # wedged loop: a verdict, too old
    assert set(stale) == AGENT_SERIES
    assert one(stale, "check_vllm_agent_up") == 0.0 and one(stale, "check_vllm_agent_verdict_age_seconds") == 95.0
    assert one(stale, "check_vllm_agent_judgement_errors_total") == 3.0


@pytest.mark.parametrize(("url", "label"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://user:s3cret@gpu-01:8000/", "http://gpu-01:8000"),
    ("HTTPS://GPU-01.example:8443/v1/?token=s3cret#frag", "https://gpu-01.example:8443/v1"),
    ("http://[::1]:8000", "http://[::1]:8000"),
])
def test_the_server_label_holds_no_secret(url, label):
    assert exposition.server_label(url) == label
    assert "s3cret" not in render(Scrape(url))[0].decode()


HOSTILE = '/models/a "quoted"\nfake_series{x="1"} 1\u202e' + "x" * 300


def test_a_model_name_is_server_text_cleaned_and_cut():
    reading = Reading(model=HOSTILE, engine="llamacpp")
    labels = named(Named(), Verdict(vocab.BUSY, OK, "", Memory()), reading)
    assert labels.engine == "llamacpp" and len(labels.model) <= exposition.MODEL_CAP
    assert "\n" not in labels.model and "\u202e" not in labels.model and labels.model.endswith("...")
    got = page(scrape(Verdict(vocab.BUSY, OK, "", Memory()), named=labels))
    assert {lab["model"] for lab, _ in got["check_vllm_verdict"]} == {labels.model}
    assert "fake_series" not in got  # the label's text never becomes a line of its own


def test_the_labels_keep_what_was_last_known():
    before = Named("vllm", "tiny-llama")
    down = Verdict(vocab.DOWN, CRITICAL, "refused", Memory())  # no reading, no baseline: nothing new said
    assert named(before, down, None) == before
    based = Memory(baseline=Baseline(Reading(model="other", engine="sglang"), None))
    assert named(before, down._replace(memory=based), None) == Named("sglang", "other")
    assert named(before, down._replace(engine="llamacpp"), None) == Named("llamacpp", "tiny-llama")
    assert named(before, down, Reading(engine="not-an-engine")) == before  # only the engine table's keys


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_watch_s_scrape_follows_its_loop(monkeypatch):
    clock, said = Clock(), []
    watch = Watch(Endpoint("http://user:pw@127.0.0.1:9"), SETTINGS, OPTIONS._replace(metrics_timeout=2.0), 1.0, 60.0,
                  say=said.append, mono=clock, wall=clock)
    assert watch.scrape().verdict is None and watch.scrape().judged_at is None
    idle = Verdict(vocab.IDLE, OK, "answered", Memory(), running=0.0, waiting=0.0, probe_seconds=0.25)
    outcome = Observation(idle, Reading(model="tiny-llama"))
    monkeypatch.setattr("check_vllm.long_running.observe", lambda *a, **k: outcome)
    watch.judge()
    got = watch.scrape()
    assert got.verdict == idle and got.named == Named("vllm", "tiny-llama") and got.judgements == 1
    assert got.idle == IdleCompletion(0.25, 1000.0) and got.judged_at == 1000.0
    outcome = Observation(idle._replace(probe_seconds=None, word=vocab.BUSY, running=1.0))
    clock.t += 2
    watch.judge()  # no idle completion this time: the last one is kept, with its time
    assert watch.scrape().idle == IdleCompletion(0.25, 1000.0)

    def broken(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr("check_vllm.long_running.observe", broken)
    watch.judge_safely()
    clock.t += watch.stale_after + 0.1
    stale = watch.scrape()
    assert stale.verdict is None and stale.errors == 1 and stale.age == pytest.approx(watch.stale_after + 0.1)
    assert "pw" not in render(stale)[0].decode()


def test_metrics_listen_without_prometheus_client_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(exposition, "available", lambda: False)
    with pytest.raises(SystemExit) as done:
        cli.main(["--metrics-listen", "127.0.0.1:1", "--listen", "127.0.0.1:1"])
    assert done.value.code == 2
    assert "--metrics-listen: the Python package prometheus-client is not installed" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:0", "host:port"])
def test_metrics_listen_needs_a_port(text, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--metrics-listen", text])
    assert done.value.code == 2 and "--metrics-listen" in capsys.readouterr().err


def test_a_verdict_s_series_are_bounded_whatever_it_says():
    full = Verdict(vocab.STUCK, CRITICAL, "x" * 5000, Memory(), running=1.0, waiting=1.0, kv_cache=1.0,
                   tokens_per_second=0.0, prompt_tokens_per_second=0.0, steps_per_second=0.0, stalled_seconds=1.0,
                   engines={str(i): vocab.STUCK for i in range(64)})
    got = page(scrape(full, idle=IdleCompletion(1.0, 1.0)))
    # the agent's, one per word, state and restartable, every figure, the idle completion and its time
    assert sum(len(v) for v in got.values()) == len(AGENT_SERIES) + len(vocab.WORDS) + 2 + len(FROM_PERFDATA) + 2
