"""What the front ends' command lines share (the check's, the handler's, the agent's): a parser that reports
instead of exiting, the number and URL checks (the connection itself: check_vllm.cli.connection). The options themselves are rows of check_vllm.cli.option_table.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

from check_vllm.contract.safe_text import without_userinfo


class UsageError(Exception):
    """A bad command line: each front end turns it into its own exit code and message."""


class Deadline(Exception):
    """The run's -t is spent: raised by the check's alarm, answered as UNKNOWN by the check and by --probe's
    answer (here, not in cli.py, so the probe's glue needs no import back up into the command line)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def number(kind: Callable[[str], Any], low: float = 0) -> Callable[[str], Any]:
    """An argparse type: a finite number of `kind` (int or float) at least `low`."""
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}: {text!r}")
        return value
    return convert


def check_url(url: str, option: str = "--url") -> None:
    """A URL the HTTP client can use, or a UsageError: parsed by httpx itself, with the checks its
    client applies (http or https, a host, a port it can connect to). A URL that passed a looser check
    here failed on every request at once, which read as a server that never answers."""
    import httpx  # here, not at import: the handler's other paths and --help do not need it

    shown = without_userinfo(url)
    hint = f"{option} must look like http://HOST:PORT (an IPv6 address in brackets: http://[::1]:8000), not {shown!r}"
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as err:
        raise UsageError(f"{hint}: {str(err).replace(url, shown)}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        port = _bad_port(url)
        raise UsageError(f"{hint}: Invalid port: {port!r}" if port else hint)
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise UsageError(f"{hint}: port {parsed.port} is out of range")
    if any(c in parsed.host for c in "%/\\ ") or parsed.host != parsed.host.strip("."):
        raise UsageError(f"{hint}: {parsed.host!r} is not a host name")


def _bad_port(url: str) -> str | None:
    """The port part of the URL's authority when it is no number, in httpx's own split (host up to the
    first colon, unless bracketed). httpx 0.28 says so itself; Debian 12's 0.23 parses such a URL into
    one without a host, and the operator would not learn which part was wrong."""
    authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rpartition("@")[2]
    if authority.startswith("["):
        _, _, rest = authority.partition("]")
        port = rest[1:] if rest.startswith(":") else None
    else:
        port = authority.partition(":")[2] or None
    return port if port and not port.isdigit() else None
