"""What the containers tier reports at the end (conftest.py prints it): timings and measured tables, by title."""

from __future__ import annotations

TIMINGS: dict[str, float] = {}
REPORT: dict[str, str] = {}
