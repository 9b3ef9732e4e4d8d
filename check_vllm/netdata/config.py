"""vllm.conf -> jobs: one INI section per vLLM server, [DEFAULT] for what they share.

A section with a bad value is reported and skipped; the other jobs still run. Only a file with no
usable job at all is a configuration that can never work (the plugin then says DISABLE). Reading a
file never blocks and never raises: a FIFO, a device, a huge or an undecodable file is a problem
line, because a plugin that hangs or dies at start-up takes every job with it.
"""

from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from check_vllm.cli.args import UsageError
from check_vllm.cli.connection import as_key, endpoint_from, read_bounded
from check_vllm.cli.option_table import BY_FLAG, FLAG, INT, NETDATA, ROWS, TEXT, Option, job_number
from check_vllm.contract.defaults import OPTIONS
from check_vllm.server.fetch import Endpoint

CONF_NAME = "vllm.conf"
DEFAULT_CONFIG_DIR = "/etc/netdata"
#: A bound on what is read at start-up: a vllm.conf is a few jobs.
CONF_LIMIT = 1024 * 1024


class ConfigError(ValueError):
    """A job (or the whole file) that cannot work as written."""


@dataclass(frozen=True)
class Job:
    """One job: its keys are the option table's Netdata rows (their `dest`), plus Netdata's own update_every and
    idle_completion; tests/unit/test_option_table.py holds the two sets equal."""

    name: str  # sanitised section name: charts are vllm_<name>.<chart>
    url: str
    update_every: int = 1
    proxy: bool = False
    engine: str = OPTIONS.engine
    stuck_readings: int = BY_FLAG["--stuck-readings"].default
    stuck_seconds: float = BY_FLAG["--stuck-seconds"].default
    idle_completion: bool = OPTIONS.probe
    #: At most one idle completion per this many seconds.
    idle_completion_every: float = BY_FLAG["--idle-completion-every"].default
    idle_completion_timeout: float = BY_FLAG["--idle-completion-timeout"].default
    model: str | None = None
    #: Per-request timeout for /metrics and /v1/models; a slow server delays only its own job.
    timeout: float = BY_FLAG["--timeout"].default
    api_key_file: str | None = None
    ca_file: str | None = None
    insecure: bool = False
    pid_file: str | None = None
    pid_command: str | None = None
    server_port: int | None = None
    server_user: str | None = None
    start_grace: float = BY_FLAG["--start-grace"].default
    stop_grace: float = BY_FLAG["--stop-grace"].default
    #: The connection its rows make (check_vllm.cli.connection), read once when the file is loaded.
    endpoint: Endpoint | None = None

    @property
    def chart_type(self) -> str:
        return f"vllm_{self.name}"

    @property
    def completes_when_idle(self) -> bool:
        """It sends the idle completion: asked to, and not through a balancer (where it could reach any backend)."""
        return self.idle_completion and not self.proxy

    def __repr__(self) -> str:  # never print the key
        return f"Job(name={self.name!r}, url={self.url!r}, update_every={self.update_every})"


#: A job's defaults, for the options a section leaves out.
JOB = Job(name="", url="")

_BOOLS = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}
#: Netdata's own: how often a job is collected (never faster than the plugin, whose interval is its default).
_UPDATE_EVERY = Option("--update-every", INT, "", "seconds between readings (never faster than the plugin's; "
                       "default: Netdata's update_every)", frozenset({NETDATA}), low=1, high=3600)
#: The job's own words for what the command lines say otherwise (its url is required, its idle completion a yes/no).
_URL = Option("--url", TEXT, "", "the server's base URL, http:// or https:// (required)", frozenset({NETDATA}))
_IDLE_COMPLETION = Option("--idle-completion", FLAG, "", "yes: send a 1-token completion when idle, to prove the "
                          "engine answers (the command lines' --no-idle-completion is idle_completion = no)",
                          frozenset({NETDATA}), default=OPTIONS.probe, aliases=("--probe",))
#: The job's keys from the option table (their kinds, bounds, choices and defaults are the table's); `url` is
#: read apart (required, and checked as a URL).
ROWS_OF_A_JOB = tuple(row for row in ROWS if NETDATA in row.fronts and row.dest != "url")
#: Every key a section may hold, as rows: what docs/netdata.md's table and contrib/netdata/vllm.conf's header say.
KEY_ROWS = (_URL, _UPDATE_EVERY, _IDLE_COMPLETION, *ROWS_OF_A_JOB)
KEYS = tuple(key for row in KEY_ROWS for key in (row.dest, *row.alias_keys))


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """vllm.conf in $NETDATA_USER_CONFIG_DIR, which Netdata sets for its plugins."""
    where = (os.environ if env is None else env).get("NETDATA_USER_CONFIG_DIR") or DEFAULT_CONFIG_DIR
    return Path(where) / CONF_NAME


def job_name(section: str) -> str:
    """Netdata ids keep [a-z0-9_]: everything else becomes `_`."""
    return re.sub(r"[^a-z0-9_]", "_", section.strip().lower()) or "_"


def _undecodable(sec: configparser.SectionProxy) -> list[str]:
    """Options whose name or value held bytes that are not UTF-8 (read as surrogates)."""
    return [key for key in sec if _surrogates(key) or _surrogates(sec.get(key) or "")]


def _surrogates(text: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def printable(text: str) -> str:
    """A name from the file, fit for stderr whatever bytes it held."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _flag(sec: configparser.SectionProxy, key: str, default: bool) -> bool:
    raw = (sec.get(key) or "").strip().lower()
    if not raw:
        return default
    if raw not in _BOOLS:
        raise ConfigError(f"{key} = {raw!r} is not yes or no")
    return _BOOLS[raw]


def _key(row: Option, sec: configparser.SectionProxy) -> str:
    """The key the section gives the row by: its own, else the one it had before (probe_timeout), never both."""
    given = [key for key in (row.dest, *row.alias_keys) if key in sec]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)} are one key (its old and new names): keep {row.dest}")
    return given[0] if given else row.dest


def _value(row: Option, sec: configparser.SectionProxy) -> Any:
    """One row's value in a section: its default when left out; a ConfigError saying what is wrong."""
    key = _key(row, sec)
    raw = sec.get(key)
    if row.kind == FLAG:
        return _flag(sec, key, row.default)
    if row.kind == TEXT:
        text = (raw or "").strip()
        if row.choices:
            text = text.lower() or row.default
            if text not in row.choices:
                raise ConfigError(f"{key} = {text!r} is not one of {', '.join(row.choices)}")
        return text or row.default
    if raw is None or not raw.strip():
        return row.default
    try:
        value = job_number(row._replace(flag="--" + key), raw)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return int(value) if row.kind == INT else value


def parse_job(section: str, sec: configparser.SectionProxy, plugin_every: int) -> Job:
    unknown = sorted(printable(k) for k in set(sec) - set(KEYS))
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}")
    url = (sec.get("url") or "").strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"url = {url!r} is not an http:// or https:// URL" if url else "no url")
    bad = _undecodable(sec)
    if bad or _surrogates(section):
        raise ConfigError(f"not UTF-8 text in {', '.join(printable(k) for k in bad) or 'the section name'}")
    try:
        every = int(job_number(_UPDATE_EVERY._replace(default=plugin_every), sec.get("update_every")))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    job = Job(name=job_name(section), url=url,
              update_every=max(every, plugin_every),  # a job never runs faster than the plugin
              idle_completion=_value(_IDLE_COMPLETION, sec), **{row.dest: _value(row, sec) for row in ROWS_OF_A_JOB})
    try:
        return replace(job, endpoint=endpoint_from(job, NETDATA, as_key))
    except UsageError as err:
        raise ConfigError(str(err)) from None


def load(text: str, plugin_every: int) -> tuple[list[Job], list[str]]:
    """Jobs from vllm.conf text, and one problem line per section that was skipped."""
    parser = configparser.ConfigParser(interpolation=None, default_section="DEFAULT")
    try:
        parser.read_string(text)
    except configparser.Error as err:
        return [], [f"{CONF_NAME} is not valid INI: {str(err).splitlines()[0]}"]
    jobs: list[Job] = []
    problems: list[str] = []
    for section in parser.sections():
        try:
            job = parse_job(section, parser[section], plugin_every)
        except ConfigError as err:
            problems.append(f"job [{printable(section)}] skipped: {err}")
            continue
        if any(j.name == job.name for j in jobs):
            problems.append(f"job [{printable(section)}] skipped: its chart id vllm_{job.name} is taken by another job")
            continue
        jobs.append(job)
    if not parser.sections():
        problems.append(f"{CONF_NAME} has no job section (e.g. [local] with url = http://127.0.0.1:8000)")
    return jobs, problems


def load_file(path: Path, plugin_every: int) -> tuple[list[Job], list[str]]:
    """Bytes that are not UTF-8 cost only the sections whose values hold them (a Latin-1 comment costs nothing)."""
    try:
        data = read_bounded(path, CONF_LIMIT)
    except OSError as err:
        return [], [f"cannot read {path}: {err.strerror or err}"]
    return load(data.decode("utf-8-sig", "surrogateescape"), plugin_every)
