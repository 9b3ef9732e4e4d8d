"""Waiting for a real component: poll until a condition holds, or fail saying what was awaited and what it shows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, predicate: Callable[[], T], timeout: float, interval: float = 0.25,
             diag: Callable[[], str] = lambda: "") -> T:
    """The predicate's first truthy value; AssertionError (callers may catch it) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{diag()}")
        time.sleep(interval)
