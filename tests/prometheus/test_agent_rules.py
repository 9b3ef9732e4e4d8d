"""contrib/prometheus/check-vllm-agent-rules.yml and its unit tests name only what the agent serves: the series,
labels and words must be the agent's own (check_vllm.haproxy.exposition, the contract's words): a rule on a name
the agent never serves would never fire, and promtool cannot know. promtool's own runs of the file are
test_rule_files.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from check_vllm.contract import vocab
from check_vllm.contract.kept import Memory
from check_vllm.contract.verdict import Verdict
from check_vllm.haproxy.exposition import IdleCompletion, Named, Scrape, render

from .conftest import REPO

pytestmark = pytest.mark.prometheus

RULES = REPO / "contrib" / "prometheus" / "check-vllm-agent-rules.yml"
UNIT = Path(__file__).resolve().parent / "check-vllm-agent-rules.test.yml"


def _served() -> dict[str, set[str]]:
    """Every series the agent can serve -> its label names (Prometheus' job and instance added)."""
    full = Verdict(vocab.STUCK, vocab.CRITICAL, "", Memory(), running=1.0, waiting=1.0, kv_cache=1.0,
                   tokens_per_second=1.0, prompt_tokens_per_second=1.0, steps_per_second=1.0, stalled_seconds=1.0)
    page = render(Scrape("http://127.0.0.1:8000", full, Named("vllm", "m"), IdleCompletion(1.0, 1.0), 1.0, 1.0))[0]
    return {s.name: {*s.labels, "job", "instance"} for f in text_string_to_metric_families(page.decode())
            for s in f.samples}


def test_the_rules_name_only_what_the_agent_serves():
    served = _served()
    for path in (RULES, UNIT):
        text = path.read_text()
        names = set(re.findall(r"\b(check_vllm_[a-z_]+)\b", text)) - {"check_vllm_agent", "check_vllm_restart"}
        assert names and names <= set(served), (path.name, sorted(names - set(served)))
        for name, labels in re.findall(r"'(check_vllm_[a-z_]+)\{([^}]*)\}'", text):  # the unit tests' input series
            assert {kv.split("=", 1)[0] for kv in labels.split(",")} == served[name], (name, labels)
        words = {w for group in re.findall(r'word=~?"([^"]+)"', text) for w in group.split("|")}
        words |= set(re.findall(r"^\s+word: (.+)$", text, re.M))
        assert words and words <= set(vocab.WORDS), sorted(words - set(vocab.WORDS))
