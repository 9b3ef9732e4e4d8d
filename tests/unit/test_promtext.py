"""check_vllm.server.promtext against prometheus_client's own parser (the reference it replaces in a run): the same
samples from every recorded real page and from generated lines, the same refusals of broken lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.server.promtext import sample

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
#: Every recorded /metrics page; llama.cpp's directory also keeps the server's other answers, HTTP and all.
PAGES = sorted(p for p in REAL.rglob("*.txt")
               if not p.name.startswith(("headers-", "health-", "timeline", "metrics-")))


def reference(line: str) -> tuple[str, dict[str, str], float]:
    (family,) = text_string_to_metric_families(line + "\n")
    (s,) = family.samples
    return s.name, s.labels, s.value


def same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # NaN


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REAL)))
def test_every_sample_line_of_every_recorded_page(page):
    lines = [ln for ln in page.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines
    for line in lines:
        got, want = sample(line), reference(line)
        assert (got.name, got.labels) == want[:2] and same(got.value, want[2]), line


LABEL_VALUE = st.text(st.sampled_from(list('ab "\\\n{},=é')), max_size=8)


def escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["vllm:num_requests_running", "vllm:generation_tokens_total", "process_start_time_seconds"]),
       st.dictionaries(st.sampled_from(["engine", "model_name", "finished_reason", "a_b"]), LABEL_VALUE, max_size=3),
       st.sampled_from(["0", "1.5", "-2", "1e3", "NaN", "+Inf", "-Inf", "2.0 1700000000000",
                        '3.0 # {trace_id="4bf9"} 1.0 1700000000.123', '4 1700000000000 # {a="b"} 1']),
       st.booleans())
def test_generated_lines_read_as_prometheus_client_reads_them(name, labels, value, trailing_comma):
    inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + ("," if trailing_comma and labels else "")
    line = f"{name}{{{inner}}} {value}" if labels or trailing_comma else f"{name} {value}"
    got, want = sample(line), reference(line)
    assert (got.name, got.labels) == want[:2] and same(got.value, want[2]), line


@pytest.mark.parametrize("line", [
    'vllm:x{engine="0"}', 'vllm:x{engine="0"} one', 'vllm:x{engine="0} 1', 'vllm:x{engine=0} 1',
    'vllm:x{engine="0"', 'vllm:x 1 2 3', "vllm:x", 'vllm:x{="0"} 1', "<html>",
])
def test_what_is_not_a_sample_line_is_refused(line):
    with pytest.raises(ValueError):
        sample(line)
