"""The operator options the front ends share (check_vllm.cli.option_table): one row each, and every front end
that takes a row takes it alike: the same flag, default and bounds on the check's, the agent's and the handler's
command lines and in a Netdata job; the Settings and Options a run gets are the row's values."""

from __future__ import annotations

import configparser
import math

import pytest

from check_vllm.cli import option_table
from check_vllm.cli.args import UsageError
from check_vllm.cli.connection import endpoint_from
from check_vllm.cli.option_table import AGENT, CHECK, FLAG, HANDLER, NETDATA, ROWS, TEXT
from check_vllm.contract.defaults import Options, Settings
from check_vllm.haproxy import cli as agent_cli
from check_vllm.nagios import cli as check_cli
from check_vllm.netdata import config as netdata_config
from check_vllm.restart import options as handler_cli

PARSERS = {CHECK: check_cli.parser, AGENT: agent_cli.parser, HANDLER: handler_cli.parser}
NUMBERS = [row for row in ROWS if row.kind not in (TEXT, FLAG)]


def flags(front: str) -> set[str]:
    return {opt for action in PARSERS[front]()._actions for opt in action.option_strings}


@pytest.mark.parametrize("front", sorted(PARSERS))
def test_each_front_end_takes_exactly_the_rows_that_name_it(front):
    have = flags(front)
    for row in ROWS:
        if (front, row.flag) == (CHECK, "--timeout"):  # the plugin API's -t: the check's whole run, its own
            assert "whole run" in next(a.help for a in PARSERS[CHECK]()._actions if "--timeout" in a.option_strings)
            continue
        assert (row.flag in have) == (front in row.fronts), (front, row.flag)


@pytest.mark.parametrize(("front", "row"), [(f, r) for r in NUMBERS for f in sorted(PARSERS) if f in r.fronts],
                         ids=lambda x: getattr(x, "flag", x))
def test_a_number_has_the_rows_default_and_bounds_on_every_command_line(front, row):
    base = ["--state", "OK", "--state-type", "HARD", "-u", "http://127.0.0.1:8000"] if front == HANDLER else []
    args = PARSERS[front]().parse_args(base)
    assert getattr(args, row.dest) == row.default
    with pytest.raises(UsageError):
        PARSERS[front]().parse_args([*base, row.flag, str(row.low - 1)])
    if math.isfinite(row.high):
        with pytest.raises(UsageError):
            PARSERS[front]().parse_args([*base, row.flag, str(row.high + 1)])
    inside = row.low if row.low else 1
    assert getattr(PARSERS[front]().parse_args([*base, row.flag, str(inside)]), row.dest) == inside


def job(**keys: str):
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_dict({"j": {"url": "http://127.0.0.1:8000", **keys}})
    return netdata_config.parse_job("j", ini["j"], 1)


@pytest.mark.parametrize("row", [r for r in NUMBERS if NETDATA in r.fronts], ids=lambda r: r.dest)
def test_a_netdata_job_takes_the_same_number_with_the_same_default_and_bounds(row):
    assert getattr(job(), row.dest) == row.default
    with pytest.raises(netdata_config.ConfigError, match=row.dest):
        job(**{row.dest: str(row.low - 1)})
    assert getattr(job(**{row.dest: str(row.high if math.isfinite(row.high) else 7)}), row.dest) == \
        (row.high if math.isfinite(row.high) else 7)


def test_the_run_gets_the_rows_values_and_the_front_ends_own():
    args = check_cli.parser().parse_args(["--stuck-readings", "5", "--stuck-seconds", "30", "--no-probe",
                                          "--start-grace", "60", "--server-user", "vllm", "-t", "20"])
    settings, options = option_table.settings_from(args, CHECK), option_table.options_from(args, CHECK)
    assert settings == Settings(stuck_readings=5, stuck_seconds=30.0, start_grace=60.0)
    # the check's -t is its whole run, not the agent's per-request --timeout: no metrics_timeout from it
    assert options == Options(probe=False, server_user="vllm")
    agent = agent_cli.parser().parse_args(["--timeout", "2", "--model", "m"])
    assert option_table.options_from(agent, AGENT, reread=False) == Options(model="m", metrics_timeout=2.0,
                                                                           reread=False)


def _endpoint(front: str, flags: list[str]):
    """The Endpoint `front` makes of these command-line flags (a Netdata job: the same rows as its keys)."""
    if front == NETDATA:
        keys = {flag[2:].replace("-", "_"): value for flag, value in zip(flags[::2], flags[1::2], strict=True)}
        return job(**keys).endpoint
    return endpoint_from(PARSERS[front]().parse_args(flags), front)


@pytest.mark.parametrize("front", [CHECK, AGENT, NETDATA])
def test_the_key_file_reads_by_one_rule_on_every_front_end(front, tmp_path):
    """The first line, without a BOM and the white space around it; a second line is no part of the key."""
    two = tmp_path / "two-lines"
    two.write_bytes("\ufeff  sk-first \nsecond line\n".encode())
    endpoint = _endpoint(front, ["--api-key-file", str(two)])
    assert endpoint.api_key == "sk-first"


@pytest.mark.parametrize("front", [CHECK, AGENT, NETDATA])
@pytest.mark.parametrize(("content", "why"), [(b"\n", "is empty"), ("k\u00e9y".encode("utf-16"), "not UTF-8 text"),
                                              (b"k" * 20_000, "larger than 16 KiB"), (b"a\x01b", "cannot be sent")])
def test_a_bad_key_file_is_the_same_mistake_on_every_front_end(front, content, why, tmp_path):
    key = tmp_path / "key"
    key.write_bytes(content)
    with pytest.raises((UsageError, netdata_config.ConfigError), match=why) as err:
        _endpoint(front, ["--api-key-file", str(key)])
    assert ("api_key_file" if front == NETDATA else "--api-key-file") in str(err.value)


@pytest.mark.parametrize("front", [CHECK, AGENT, NETDATA])
def test_tls_rows_on_every_front_end(front, tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises((UsageError, netdata_config.ConfigError), match="not a readable PEM CA bundle"):
        _endpoint(front, ["--ca-file", str(bad)])
    insecure = PARSERS[front]().parse_args(["--insecure"]) if front != NETDATA else None
    endpoint = job(insecure="yes").endpoint if front == NETDATA else endpoint_from(insecure, front)
    assert endpoint.insecure is True and endpoint.ca_data is None


def test_a_netdata_job_takes_every_row_that_names_it_and_nothing_else():
    rows = {row.dest for row in ROWS if NETDATA in row.fronts}
    old = {key for row in ROWS if NETDATA in row.fronts for key in row.alias_keys}
    assert set(netdata_config.KEYS) == rows | old | {"update_every", "idle_completion", "probe"}
    fields = set(netdata_config.Job.__dataclass_fields__)
    assert rows <= fields, rows - fields
    witness = job(pid_file="/run/vllm.pid", server_port="8001", server_user="vllm", start_grace="60")
    assert option_table.options_from(witness, NETDATA).pid_file == "/run/vllm.pid"
    assert option_table.options_from(witness, NETDATA).server_port == 8001
    assert option_table.settings_from(witness, NETDATA).start_grace == 60.0


@pytest.mark.parametrize("front", sorted(PARSERS))
def test_an_old_flag_is_an_alias_of_its_new_name(front):
    """Deployed command lines keep working: --probe-timeout is --idle-completion-timeout, and its help says so."""
    base = ["--state", "OK", "--state-type", "HARD", "-u", "http://127.0.0.1:8000"] if front == HANDLER else []
    for row in ROWS:
        if front not in row.fronts or not row.aliases:
            continue
        for alias in row.aliases:
            given = [alias] if row.kind == FLAG else [alias, "7"]
            args = PARSERS[front]().parse_args([*base, *given])
            assert getattr(args, row.dest) == (True if row.kind == FLAG else 7), (front, alias)
        assert f"(was {', '.join(row.aliases)})" in PARSERS[front]().format_help().replace("\n", " ").replace(
            "  ", " ") or all(a in PARSERS[front]().format_help() for a in row.aliases)


def test_a_netdata_job_takes_a_keys_old_name_but_not_both():
    assert job(probe_timeout="7").idle_completion_timeout == 7.0
    assert job(probe="no").idle_completion is False
    with pytest.raises(netdata_config.ConfigError, match="idle_completion_every and probe_every are one key"):
        job(probe_every="5", idle_completion_every="6")
