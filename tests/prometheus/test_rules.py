"""contrib/prometheus/vllm-rules.yml's unit tests feed in the real vLLM pages' values (tests/fixtures/real/): each
value a unit test's input series holds is read from the page it names. promtool's own runs of the file are
test_rule_files.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import REPO

pytestmark = pytest.mark.prometheus

UNIT = Path(__file__).resolve().parent / "vllm-rules.test.yml"
PAGES = REPO / "tests" / "fixtures" / "real"


# The values the unit tests feed in, and the real page each one is copied from.
FROM_PAGES = [
    ("saturated.txt", "vllm:iteration_tokens_total_count", "993"),
    ("saturated_b.txt", "vllm:iteration_tokens_total_count", "2608"),
    ("frozen_a.txt", "vllm:iteration_tokens_total_count", "2609"),
    ("frozen_b.txt", "vllm:iteration_tokens_total_count", "2609"),
    ("idle.txt", "vllm:iteration_tokens_total_count", "1"),
    ("restarted.txt", "vllm:iteration_tokens_total_count", "0"),
    ("saturated.txt", "vllm:generation_tokens_total", "1984"),
    ("saturated_b.txt", "vllm:generation_tokens_total", "5214"),
    ("frozen_a.txt", "vllm:generation_tokens_total", "5216"),
    ("saturated.txt", "vllm:prompt_tokens_total", "52"),
    ("saturated_b.txt", "vllm:prompt_tokens_total", "102"),
    ("idle.txt", "vllm:prompt_tokens_total", "2"),
    ("saturated.txt", "vllm:num_requests_running", "2"),
    ("saturated.txt", "vllm:num_requests_waiting", "3"),
    ("frozen_b.txt", "vllm:num_requests_waiting", "3"),
    ("idle.txt", "vllm:num_requests_running", "0"),
    ("saturated.txt", "vllm:kv_cache_usage_perc", "0.003907203907203893"),
    ("saturated_b.txt", "vllm:kv_cache_usage_perc", "0.0024420024420024333"),
    ("frozen_a.txt", "vllm:kv_cache_usage_perc", "0.0024420024420024333"),
    ("saturated.txt", "process_start_time_seconds", "1.79601624842e+09"),
    ("restarted.txt", "process_start_time_seconds", "1.79601627907e+09"),
]


def _sample(page: str, name: str) -> float:
    text = (PAGES / page).read_text()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not on {page}")


@pytest.mark.parametrize(("page", "name", "value"), FROM_PAGES)
def test_the_unit_test_values_are_the_real_pages_values(page, name, value):
    assert _sample(page, name) == float(value)
    unit = UNIT.read_text()
    lines = unit.splitlines()
    values = " ".join(lines[i + 1] for i, ln in enumerate(lines) if ln.strip().startswith(f"- series: '{name}{{"))
    assert re.search(rf"(?<![\d.]){re.escape(value)}(?![\d.e])", values), f"{value} ({page}) unused for {name}"
    assert page in unit
