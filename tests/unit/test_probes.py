"""The orchestrator probes' table (check_vllm.probes.answers): every verdict word and state x probe kind, and
every fault of the monitoring side; the pre-scan of --probe (check_vllm.probes.answers.kind_in)."""

from __future__ import annotations

import pytest

from check_vllm.contract import rotation, vocab
from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, OK, UNKNOWN, WARNING
from check_vllm.probes import answers as probes
from check_vllm.probes.answers import FAIL, KINDS, LIVENESS, NO_KIND, PASS, READINESS, STARTUP, Seen, answer, kind_in

EVERY = [(w.word, s) for w in vocab.VERDICTS for s in w.states]
#: Words whose verdict rests on a /metrics reading of this run (the glue sets `reading` from its engines).
READ = {vocab.BUSY, vocab.STALLING, vocab.STUCK, vocab.IDLE, vocab.RESTARTED, vocab.SLEEPING, vocab.BALANCER}


def seen(word: str, state: int, **kw: object) -> Seen:
    return Seen(word, state, f"{word}: why", reading=word in READ, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("word", "state"), EVERY)
def test_liveness_fails_exactly_where_check_vllm_restart_would_restart(word, state):
    a = answer(LIVENESS, seen(word, state))
    restart = word in vocab.RESTARTABLE and state == CRITICAL
    assert a.code == (FAIL if restart else PASS), a
    assert a.in_spite == (not restart and state != OK), a


@pytest.mark.parametrize(("word", "state"), EVERY)
def test_readiness_fails_where_the_agent_takes_the_server_out(word, state):
    entry = rotation.rotation_for(word, state)
    a = answer(READINESS, seen(word, state))
    assert a.code == (PASS if entry in (vocab.READY, vocab.ABSTAIN) else FAIL), a
    if a.passed:
        assert a.in_spite == (entry == vocab.ABSTAIN or state != OK), a


@pytest.mark.parametrize(("word", "state"), EVERY)
def test_startup_passes_once_it_served(word, state):
    a = answer(STARTUP, seen(word, state))
    served = word in READ or (state != UNKNOWN and rotation.rotation_for(word, state) == vocab.READY)
    assert a.code == (PASS if served else FAIL), a


@pytest.mark.parametrize(("word", "state", "kind", "code"), [
    (vocab.BUSY, OK, LIVENESS, PASS), (vocab.BUSY, OK, READINESS, PASS), (vocab.BUSY, OK, STARTUP, PASS),
    (vocab.STALLING, WARNING, LIVENESS, PASS), (vocab.STALLING, WARNING, READINESS, FAIL),
    (vocab.STALLING, WARNING, STARTUP, PASS),
    (vocab.STUCK, CRITICAL, LIVENESS, FAIL), (vocab.STUCK, CRITICAL, READINESS, FAIL),
    (vocab.DOWN, CRITICAL, LIVENESS, FAIL), (vocab.DOWN, CRITICAL, READINESS, FAIL), (vocab.DOWN, CRITICAL, STARTUP, FAIL),
    (vocab.UNRESPONSIVE, WARNING, LIVENESS, PASS), (vocab.UNRESPONSIVE, CRITICAL, LIVENESS, FAIL),
    (vocab.STARTING, WARNING, LIVENESS, PASS), (vocab.STARTING, WARNING, READINESS, FAIL),
    (vocab.STARTING, WARNING, STARTUP, FAIL),
    (vocab.STOPPING, WARNING, LIVENESS, PASS), (vocab.STOPPING, WARNING, READINESS, FAIL),
    (vocab.SLEEPING, OK, LIVENESS, PASS), (vocab.SLEEPING, OK, READINESS, FAIL), (vocab.SLEEPING, OK, STARTUP, PASS),
    (vocab.UNREACHABLE, UNKNOWN, LIVENESS, PASS), (vocab.UNREACHABLE, UNKNOWN, READINESS, PASS),
    (vocab.PROTOCOL, UNKNOWN, LIVENESS, PASS), (vocab.PROTOCOL, UNKNOWN, READINESS, PASS),
    (vocab.BALANCER, WARNING, READINESS, PASS),
])
def test_the_issue_s_mapping(word, state, kind, code):
    assert answer(kind, seen(word, state)).code == code


FAULTS = ["state not saved: cannot open state lock in /state: Read-only file system",
          "usage: unrecognized arguments: --bogus (see --help)", "timed out after 5 s waiting for GET /metrics",
          "internal error: ZeroDivisionError: division by zero", "state file busy: locked by another run"]


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize(("word", "state"), [("", UNKNOWN), *EVERY])
def test_a_fault_of_ours_never_fails_liveness_nor_readiness(fault, word, state):
    for kind in (LIVENESS, READINESS):
        a = answer(kind, Seen(word, state, f"{word}: why", fault=fault))
        assert a.passed and a.in_spite, a
        assert a.line().startswith(f"{kind} pass in spite of: UNKNOWN {fault[:20]}"), a.line()


@pytest.mark.parametrize("fault", FAULTS)
def test_startup_on_a_fault_of_ours_passes_only_if_it_served_before(fault):
    assert answer(STARTUP, Seen(fault=fault)).code == FAIL
    assert answer(STARTUP, Seen(fault=fault)).line().endswith("(no reading yet)")
    a = answer(STARTUP, Seen(fault=fault, served_before=True))
    assert a.passed and a.in_spite and a.line().endswith("(it served before)")
    # a reading this run is enough, whatever else went wrong
    assert answer(STARTUP, Seen(vocab.BUSY, OK, "busy: 1 running", fault=fault, reading=True)).passed


@pytest.mark.parametrize(("s", "line"), [
    (Seen(vocab.BUSY, OK, "busy: 2 running, 0 waiting", reading=True), "liveness pass: busy: 2 running, 0 waiting"),
    (Seen(vocab.STUCK, CRITICAL, "stuck: no progress for 130 s"), "liveness fail: CRITICAL stuck: no progress for 130 s"),
    (Seen(vocab.STALLING, WARNING, "stalling: 5 s"), "liveness pass in spite of: WARNING stalling: 5 s"),
    (Seen(fault="state not saved: x", word=vocab.BUSY, code=OK, summary="busy: 1"),
     "liveness pass in spite of: UNKNOWN state not saved: x; busy: 1"),
    (Seen(), "liveness pass in spite of: no reason given"),
])
def test_the_line(s, line):
    assert answer(LIVENESS, s).line() == line


def test_the_line_is_one_clean_capped_line():
    a = answer(READINESS, Seen(vocab.STALLING, WARNING, "stalling: model \x1b[31mx\ny\u202e" + "z" * 500))
    line = a.line()
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert len(line) <= probes.LINE_CAP and line.endswith("...")


def test_every_kind_has_a_rule_and_the_kubelet_order():
    assert set(probes.RULES) == set(KINDS) and KINDS[0] == STARTUP
    assert {CODE_NAMES[PASS], CODE_NAMES[FAIL]} == {"OK", "WARNING"}  # 0 and 1: nothing else leaves a probe


@pytest.mark.parametrize(("argv", "kind"), [
    ([], None), (["-u", "http://x"], None), (["--probe", "liveness"], LIVENESS), (["--probe=startup"], STARTUP),
    (["-u", "x", "--probe", "readiness", "-t", "5"], READINESS), (["--probe", "bogus"], NO_KIND),
    (["--probe"], NO_KIND), (["--", "--probe", "liveness"], None),
    (["--probe-timeout", "5"], None), (["--probe-timeout=5", "--no-probe"], None),  # a plain check's own options
])
def test_the_pre_scan(argv, kind):
    assert kind_in(argv) == kind


@pytest.mark.parametrize(("argv", "verbose"), [
    ([], False), (["-v"], True), (["-vv"], True), (["--verbose"], True), (["-u", "x", "-t", "5"], False),
    (["--", "-v"], False), (["-V"], False),
])
def test_the_verbose_pre_scan(argv, verbose):
    from check_vllm.probes.exec_probe import verbose_in

    assert verbose_in(argv) is verbose


# --reuse-verdict (probes.reused): a saved verdict stands for a reading only as a pass, never for startup


@pytest.mark.parametrize(("word", "state"), EVERY)
@pytest.mark.parametrize("kind", [LIVENESS, READINESS])
def test_a_saved_verdict_is_reused_exactly_where_it_passes(kind, word, state):
    s = seen(word, state)
    reply = probes.reused(kind, s, 3.0, 5.0)
    if answer(kind, s).passed:
        assert reply is not None and reply.passed and reply.why.endswith("(reused: the verdict of 3 s ago)"), reply
        assert reply.in_spite == answer(kind, s).in_spite
    else:
        assert reply is None, "a fail restarts the server or takes it out: it is read afresh"


@pytest.mark.parametrize("age", [-1.0, 5.01, 60.0])
def test_a_verdict_from_the_future_or_older_than_allowed_is_read_afresh(age):
    assert probes.reused(LIVENESS, seen(vocab.BUSY, OK), age, 5.0) is None


def test_startup_never_reuses_a_verdict_it_may_be_of_the_process_before():
    assert probes.reused(STARTUP, seen(vocab.BUSY, OK), 0.0, 5.0) is None
    assert probes.reused(LIVENESS, seen(vocab.BUSY, OK), 0.0, 0.0) is not None  # 0 s old, within 0 s
    assert probes.reused(LIVENESS, Seen(), 0.0, 5.0) is None  # no verdict


def test_startup_passes_a_server_that_lists_its_model_without_a_reading():
    """llama.cpp without --metrics, SGLang without --enable-metrics, a page the key cannot open: `no metrics` for
    ever, the model list answering. Startup passes (and says why); without the model list it still fails."""
    said = "no metrics: /metrics answered HTTP 501 (llama.cpp serves it only with --metrics); model tiny listed"
    a = answer(STARTUP, Seen(vocab.NO_METRICS, WARNING, said, loaded=True))
    assert a.passed and a.line() == f"startup pass in spite of: WARNING {said} (it lists its model: loaded)"
    assert not answer(STARTUP, Seen(vocab.NO_METRICS, WARNING, said)).passed
    assert not answer(STARTUP, Seen(vocab.NO_METRICS, WARNING, said, fault="state not saved", loaded=True)).passed


def test_startup_passes_a_proxy_job_whose_model_list_names_the_model():
    """--proxy never reads /metrics: its OK (the model list names the model, Verdict.loaded) is its only sign of
    having loaded. Startup passed only for `no metrics`: a proxy's startup probe failed for ever (issue 52)."""
    said = "proxy: /v1/models answers; model tiny listed"
    a = answer(STARTUP, Seen(vocab.PROXY, OK, said, loaded=True))
    assert a.passed and a.line() == f"startup pass in spite of: {said} (it lists its model: loaded)"
    assert not answer(STARTUP, Seen(vocab.PROXY, OK, said)).passed
