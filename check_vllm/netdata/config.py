"""vllm.conf -> jobs: one INI section per vLLM server, [DEFAULT] for what they share.

A section with a bad value is reported and skipped; the other jobs still run. Only a file with no
usable job at all is a configuration that can never work (the plugin then says DISABLE). Reading a
file never blocks and never raises: a FIFO, a device, a huge or an undecodable file is a problem
line, because a plugin that hangs or dies at start-up takes every job with it.
"""

from __future__ import annotations

import configparser
import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from check_vllm.contract.defaults import OPTIONS
from check_vllm.front.option_table import BY_FLAG, INT, NETDATA, ROWS, Option, job_number

CONF_NAME = "vllm.conf"
DEFAULT_CONFIG_DIR = "/etc/netdata"
#: Bounds on what is read at start-up: a key is a line, a vllm.conf a few jobs.
KEY_LIMIT = 16 * 1024
CONF_LIMIT = 1024 * 1024


class ConfigError(ValueError):
    """A job (or the whole file) that cannot work as written."""


@dataclass(frozen=True)
class Job:
    name: str  # sanitised section name: charts are vllm_<name>.<chart>
    url: str
    update_every: int = 1
    proxy: bool = False
    stuck_readings: int = BY_FLAG["--stuck-readings"].default
    stuck_seconds: float = BY_FLAG["--stuck-seconds"].default
    probe: bool = OPTIONS.probe
    #: At most one idle probe per this many seconds.
    probe_every: float = BY_FLAG["--probe-every"].default
    probe_timeout: float = BY_FLAG["--probe-timeout"].default
    #: Per-request timeout for /metrics and /v1/models; a slow server delays only its own job.
    timeout: float = BY_FLAG["--timeout"].default
    api_key: str | None = None
    model: str | None = None
    engine: str = OPTIONS.engine

    @property
    def chart_type(self) -> str:
        return f"vllm_{self.name}"

    @property
    def probes(self) -> bool:
        return self.probe and not self.proxy

    def __repr__(self) -> str:  # never print the key
        return f"Job(name={self.name!r}, url={self.url!r}, update_every={self.update_every})"


#: A job's defaults, for the options a section leaves out.
JOB = Job(name="", url="")

_BOOLS = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}
#: Netdata's own: how often a job is collected (never faster than the plugin, whose interval is its default).
_UPDATE_EVERY = Option("--update-every", INT, "", "seconds between two collections", frozenset({NETDATA}), low=1,
                       high=3600)
#: The option table's numbers a job takes (their keys, bounds and defaults are the table's).
_NUMBERS = tuple(row for row in ROWS if NETDATA in row.fronts and row.kind in ("int", "float"))
_KNOWN = {"url", "proxy", "update_every", "probe", "api_key_file", "model", "engine", *(row.dest for row in _NUMBERS)}
_ENGINE = BY_FLAG["--engine"]


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """vllm.conf in $NETDATA_USER_CONFIG_DIR, which Netdata sets for its plugins."""
    where = (os.environ if env is None else env).get("NETDATA_USER_CONFIG_DIR") or DEFAULT_CONFIG_DIR
    return Path(where) / CONF_NAME


def job_name(section: str) -> str:
    """Netdata ids keep [a-z0-9_]: everything else becomes `_`."""
    return re.sub(r"[^a-z0-9_]", "_", section.strip().lower()) or "_"


def read_bytes(path: Path | str, limit: int) -> bytes:
    """A regular file's bytes, at most `limit`; opened O_NONBLOCK so a FIFO cannot hang start-up."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit // 1024} KiB")
    return data


def _api_key(key_file: str) -> str | None:
    """The key a header can carry: UTF-8 (a BOM allowed) holding printable ASCII only."""
    try:
        text = read_bytes(key_file, KEY_LIMIT).decode("utf-8-sig")
    except OSError as err:
        raise ConfigError(f"api_key_file {key_file}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"api_key_file {key_file}: not UTF-8 text (UTF-16? save it as UTF-8)") from None
    key = text.strip()
    if not key:
        raise ConfigError(f"api_key_file {key_file} is empty (leave api_key_file out for no key)")
    if not all(" " < ch < "\x7f" for ch in key):
        raise ConfigError(f"api_key_file {key_file}: holds characters an HTTP header cannot carry")
    return key


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


def parse_job(section: str, sec: configparser.SectionProxy, plugin_every: int) -> Job:
    unknown = sorted(printable(k) for k in set(sec) - _KNOWN)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}")
    url = (sec.get("url") or "").strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"url = {url!r} is not an http:// or https:// URL" if url else "no url")
    bad = _undecodable(sec)
    if bad or _surrogates(section):
        raise ConfigError(f"not UTF-8 text in {', '.join(printable(k) for k in bad) or 'the section name'}")
    key_file = (sec.get("api_key_file") or "").strip()
    api_key = _api_key(key_file) if key_file else None
    try:
        every = int(job_number(_UPDATE_EVERY._replace(default=plugin_every), sec.get("update_every")))
        numbers: dict[str, Any] = {row.dest: job_number(row, sec.get(row.dest)) for row in _NUMBERS}
    except ValueError as err:
        raise ConfigError(str(err)) from None
    numbers["stuck_readings"] = int(numbers["stuck_readings"])
    engine = (sec.get("engine") or "").strip().lower() or JOB.engine
    if engine not in _ENGINE.choices:
        raise ConfigError(f"engine = {engine!r} is not one of {', '.join(_ENGINE.choices)}")
    return Job(
        name=job_name(section),
        url=url,
        update_every=max(every, plugin_every),  # a job never runs faster than the plugin
        proxy=_flag(sec, "proxy", JOB.proxy),
        probe=_flag(sec, "probe", JOB.probe),
        api_key=api_key,
        model=(sec.get("model") or "").strip() or None,
        engine=engine,
        **numbers,
    )


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
        data = read_bytes(path, CONF_LIMIT)
    except OSError as err:
        return [], [f"cannot read {path}: {err.strerror or err}"]
    return load(data.decode("utf-8-sig", "surrogateescape"), plugin_every)
