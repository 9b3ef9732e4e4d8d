"""What the check's and the handler's command lines share: a parser that reports instead of exiting,
and the number and URL checks. Defaults come from check_vllm.contract.vocab; neither command line restates one.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn
from urllib.parse import urlsplit


class UsageError(Exception):
    """A bad command line: each front end turns it into its own exit code and message."""


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
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{option} must look like http://HOST:PORT, not {url!r}")
