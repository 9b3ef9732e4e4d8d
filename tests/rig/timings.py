"""A tier's timings: each named step's seconds, printed at the end of the run (pytest_terminal_summary)."""

from __future__ import annotations

import time


class Timings(dict[str, float]):
    """Seconds per step of one tier; `Timer(name)` records one."""

    def __init__(self, tier: str) -> None:
        super().__init__()
        self.tier = tier

    def summary(self, terminalreporter) -> None:
        if self:
            terminalreporter.write_sep("-", f"{self.tier} tier timings")
            for k, v in self.items():
                terminalreporter.write_line(f"{k}: {v:.1f}s")

    def timer(self, name: str) -> _Timer:
        return _Timer(self, name)


class _Timer:
    def __init__(self, timings: Timings, name: str) -> None:
        self.timings, self.name = timings, name

    def __enter__(self):
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.timings[self.name] = time.monotonic() - self.t0
