"""The fleet restart budget asked of the Icinga 2 API, its pure part (check_vllm.restart.fleet): the object
query's answer read into (services, proven stuck or starting), the question, the ApiUser's login, the refusals;
and the handler's --fleet-icinga options (issue 55, point 2). The answers have the shape Icinga 2's REST API
documents and 2.13 sends (doc/12-icinga2-api.md "Querying Objects", lib/remote/objectqueryhandler.cpp)."""

from __future__ import annotations

import os

import pytest

from check_vllm.cli.args import UsageError
from check_vllm.contract.engines import ENGINES
from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, STARTING, VERDICTS, WARNING
from check_vllm.restart import config, fleet
from check_vllm.restart.fleet import ICINGA, Budget, Limit, Login, login, rule
from check_vllm.restart.fleet import icinga_busy as busy
from check_vllm.restart.fleet import icinga_counts as counts
from check_vllm.restart.fleet import icinga_question as question
from check_vllm.restart.fleet import icinga_refusal as refusal
from check_vllm.restart.options import parse
from check_vllm.restart.policy import Decision

DUE = Decision(True, "verdict 'stuck' (no progress) 5 s old, service CRITICAL HARD", "restart")
PASSWORD = "s3cret-Pa55"


def service(name: str, state: float, output: str | None) -> dict:
    """One entry of GET /v1/objects/services?attrs=state&attrs=state_type&attrs=last_check_result, as 2.13
    serializes it (numbers as floats, a pending service's last_check_result null)."""
    result = None if output is None else {
        "active": True, "check_source": "gpu-01", "command": ["/usr/lib/nagios/plugins/check_vllm", "--url",
                                                             "http://127.0.0.1:8000"],
        "execution_end": 1718000000.5, "execution_start": 1718000000.1, "exit_status": state, "output": output,
        "performance_data": ["kv_cache_usage=12%;;;0;100", "running=2;;;0"], "previous_hard_state": 99.0,
        "schedule_end": 1718000000.5, "schedule_start": 1718000000.0, "scheduling_source": "icinga-master",
        "state": state, "ttl": 0.0, "type": "CheckResult",
        "vars_after": {"attempt": 1.0, "reachable": True, "state": state, "state_type": 1.0},
        "vars_before": {"attempt": 1.0, "reachable": True, "state": 0.0, "state_type": 1.0}}
    return {"attrs": {"last_check_result": result, "state": state, "state_type": 1.0}, "joins": {}, "meta": {},
            "name": f"gpu-01!{name}", "type": "Service"}


def answer(*services: dict) -> dict:
    return {"results": list(services)}


STUCK = "VLLM CRITICAL - stuck: no progress for 12 s over 2 readings; 2 running, 2 waiting"


def test_a_group_is_counted_by_its_services_and_their_last_lines():
    doc = answer(
        service("a", 2.0, STUCK),
        service("b", 2.0, "VLLM CRITICAL - down: connection refused (http://127.0.0.1:8000)"),
        service("c", 1.0, "VLLM WARNING - starting: restarted 12 s ago, not serving yet"),
        service("d", 0.0, "VLLM OK - busy: 2 running, 3 waiting, 12 tok/s"),
        service("e", 1.0, "VLLM WARNING - stalling: no progress for 12 s over 1 reading"),
        service("f", 1.0, "VLLM WARNING - unresponsive: /metrics answered HTTP 500 (for 0.0 s, 1 reading in a row)"),
        service("g", 2.0, "VLLM CRITICAL - proxy: /v1/models failed: connection refused"),
        service("h", 99.0, None),  # pending: a member not checked yet
        service("i", 2.0, "LLAMACPP CRITICAL - unresponsive: /metrics timed out (for 12 s, 2 readings in a row)"),
        service("j", 1.0, "SGLANG WARNING - starting: not serving yet"),
    )
    assert counts(doc) == (10, 5)


@pytest.mark.parametrize("line, state", [
    (STUCK, 0.0),  # the line and the service disagree (the service's state changed since): no proof
    ("VLLM_RESTART CRITICAL - due: verdict 'stuck'", 2.0),  # the restart service, were it a member
    ("PING CRITICAL - Packet loss = 100%", 2.0),  # another plugin's line
    ("VLLM CRITICAL - stuckish: not a word", 2.0),
    ("vllm CRITICAL - stuck: lower case is not the check's", 2.0),
    ("Check command 'vllm' does not exist.", 3.0),  # an agent before its config sync
    ("Remote Icinga instance 'gpu-01' is not connected to 'icinga-master'", 3.0),
])
def test_what_is_not_the_checks_proof_is_not_counted(line, state):
    assert counts(answer(service("a", state, line))) == (1, 0)


@pytest.mark.parametrize("engine", [e.label for e in ENGINES])
@pytest.mark.parametrize(("word", "state"), [(w.word, s) for w in VERDICTS for s in w.states])
def test_every_word_at_every_state_counts_as_the_contract_says(engine, word, state):
    line = f"{engine} {CODE_NAMES[state]} - {word}: what the check said"
    expected = (state == CRITICAL and next(w for w in VERDICTS if w.word == word).restartable) or \
        (state == WARNING and word == STARTING)
    assert busy({"state": float(state), "last_check_result": {"output": line}}) is expected, line


@pytest.mark.parametrize("doc", [
    None, [], "results", {"results": "x"}, {"results": [1]}, {"results": [{"attrs": None}]},
    {"results": [service("a", 2.0, STUCK), {"name": "no attrs"}]},
    {"error": 401.0, "status": "Unauthorized. Please check your user credentials."},
])
def test_a_malformed_answer_is_no_count(doc):
    assert counts(doc) is None


def test_an_empty_group_is_counted_as_empty_and_odd_attributes_are_not_proof():
    assert counts({"results": []}) == (0, 0)
    odd = {"attrs": {"state": 2.0, "last_check_result": {"output": 12}}}
    assert counts({"results": [odd, {"attrs": {"state": "2", "last_check_result": {"output": STUCK}}}]}) == (2, 0)


def test_the_question_binds_the_group_as_a_filter_variable_never_into_the_filter():
    body = question("gpu-a")
    assert body == {"filter": "group in service.groups", "filter_vars": {"group": "gpu-a"},
                    "attrs": ["state", "state_type", "last_check_result"]}
    assert "gpu-a" not in body["filter"]
    assert fleet.ICINGA_HEADERS["X-HTTP-Method-Override"] == "GET"  # the body of a GET, as the docs advise


@pytest.mark.parametrize("text, want", [
    ("root:icinga\n", Login("root", "icinga")),
    ("\ufeff  fleet:pa:ss word \nsecond line ignored", Login("fleet", "pa:ss word")),
])
def test_a_login_is_the_first_line_user_colon_password(text, want):
    assert login(text) == want


@pytest.mark.parametrize("text", ["", "\n", "root", ":icinga", "root:", "\nroot:icinga"])
def test_a_login_needs_a_user_and_a_password(text):
    assert login(text) is None


def test_a_login_never_shows_itself():
    secret = Login("fleet", PASSWORD)
    assert PASSWORD not in repr(secret) and PASSWORD not in str(secret) and PASSWORD not in f"{secret}"
    assert PASSWORD not in repr(budget(secret))


@pytest.mark.parametrize("status, doc, said", [
    (401, {"error": 401.0, "status": "Unauthorized. Please check your user credentials."},
     "the Icinga 2 API refused the user (HTTP 401: Unauthorized. Please check your user credentials.)"),
    (401, None, "the Icinga 2 API refused the user (HTTP 401)"),
    (404, {"error": 404.0, "status": "No objects found."},
     "the Icinga 2 API answered HTTP 404: No objects found.: does the ApiUser have the permission "
     "objects/query/Service?"),
    (500, {"error": 500.0, "status": "line\none\x1b[31m"}, "the Icinga 2 API answered HTTP 500: line one [31m"),
])
def test_a_refusal_says_the_apis_words_cleaned(status, doc, said):
    assert refusal(status, doc) == said


def budget(secret: Login | None = None, url: str = "https://master:5665") -> Budget:
    return Budget(url, "gpu-a", Limit(servers=2), source=ICINGA, login=secret)


def test_the_line_names_the_servicegroup_and_the_icinga_2_it_asked():
    held = rule(budget(), 3, 4, DUE)
    assert not held.act and held.why.endswith(
        "but fleet budget: 3 of 4 servers of servicegroup gpu-a in Icinga 2 at https://master:5665 are proven "
        "stuck or starting (at most 2 at once): not restarting, a person decides"), held.why
    kept = rule(budget(), 2, 4, DUE)
    assert kept.act and "fleet budget: 2 of 4 servers of servicegroup gpu-a in Icinga 2 at " in kept.why
    assert budget(url="https://u:pw@master:5665").asked == "Icinga 2 at https://***@master:5665"
    prom = Budget("http://u:pw@prometheus:9090", "gpu-a", Limit(servers=2))
    assert prom.asked == "Prometheus at http://***@prometheus:9090" and prom.members == "group gpu-a"


BASE = ["--state", "CRITICAL", "--state-type", "HARD", "--url", "http://127.0.0.1:8000"]
FLEET = ["--fleet-group", "gpu-a", "--fleet-max", "2"]


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "icinga-user"
    path.write_text(f"fleet:{PASSWORD}\n")
    return str(path)


def test_the_options_make_an_icinga_budget_with_its_login_read(user_file):
    args, _, _ = parse([*BASE, "--fleet-icinga", "https://master:5665/", "--fleet-icinga-user-file", user_file,
                        *FLEET, "--", "true"])
    made = config._budget(args)
    assert made is not None and made.source == "icinga" and made.url == "https://master:5665"
    assert made.login == Login("fleet", PASSWORD) and made.ca_data is None and made.limit == Limit(servers=2)
    assert config._budget(parse([*BASE, "--", "true"])[0]) is None


@pytest.mark.parametrize("extra, said", [
    (["--fleet-prometheus", "http://p:9090", "--fleet-icinga", "https://m:5665"], "are exclusive"),
    (["--fleet-icinga", "https://m:5665", "--fleet-group", "gpu-a"],
     "needs --fleet-icinga, --fleet-group and --fleet-max together (given: --fleet-icinga, --fleet-group)"),
    (["--fleet-icinga", "http://m:5665", *FLEET], "must be an https:// URL"),
    (["--fleet-icinga", "https://m:5665", *FLEET], "needs --fleet-icinga-user-file"),
    (["--fleet-icinga-user-file", "/nowhere", "--fleet-prometheus", "http://p:9090", *FLEET],
     "--fleet-icinga-user-file goes with --fleet-icinga"),
    (["--fleet-ca-file", "/nowhere"], "--fleet-ca-file goes with"),
    (["--fleet-icinga", "https://m:5665", "--fleet-icinga-user-file", "/nowhere/file", *FLEET],
     "cannot read --fleet-icinga-user-file: No such file"),
])
def test_half_a_budget_or_a_wrong_source_is_a_usage_error(extra, said):
    with pytest.raises(UsageError) as err:
        parse([*BASE, *extra, "--", "true"])
    assert said in str(err.value), str(err.value)


def test_a_url_with_a_login_is_refused_without_showing_it(user_file):
    with pytest.raises(UsageError) as err:
        parse([*BASE, "--fleet-icinga", f"https://fleet:{PASSWORD}@m:5665", "--fleet-icinga-user-file", user_file,
               *FLEET, "--", "true"])
    assert "must not carry user:password" in str(err.value) and PASSWORD not in str(err.value)


@pytest.mark.parametrize("content", ["", f"{PASSWORD}\n", f":{PASSWORD}", "\n\n"])
def test_a_user_file_without_a_login_is_refused_without_a_byte_of_it(tmp_path, content):
    path = tmp_path / "icinga-user"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        parse([*BASE, "--fleet-icinga", "https://m:5665", "--fleet-icinga-user-file", str(path), *FLEET, "--",
               "true"])
    assert f"--fleet-icinga-user-file {path} holds no user:password line" in str(err.value)
    assert PASSWORD not in str(err.value)


def test_a_user_file_that_is_no_regular_file_is_refused_and_a_bad_ca_file_too(tmp_path, user_file):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for where in (tmp_path, fifo):  # never blocks on a FIFO, never reads a directory
        with pytest.raises(UsageError, match="cannot read --fleet-icinga-user-file .*: not a regular file"):
            parse([*BASE, "--fleet-icinga", "https://m:5665", "--fleet-icinga-user-file", str(where), *FLEET,
                   "--", "true"])
    with pytest.raises(UsageError, match="--fleet-ca-file .*: not a readable PEM CA bundle"):
        parse([*BASE, "--fleet-icinga", "https://m:5665", "--fleet-icinga-user-file", user_file,
               "--fleet-ca-file", user_file, *FLEET, "--", "true"])
