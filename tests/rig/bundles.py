"""Reading a post-mortem's Result in the tests that take one (host tier, real vLLM, real llama.cpp)."""

from __future__ import annotations

from check_vllm.postmortem.collect import Result


def outcome(result: Result, prefix: str) -> str:
    """The outcome of the one step whose name starts with `prefix`."""
    said = [o for s, o in result.steps if s.startswith(prefix)]
    assert len(said) == 1, (prefix, result.steps)
    return said[0]


def text(result: Result, name: str) -> str:
    """A file of the bundle, as text."""
    assert result.path is not None, result.steps
    return (result.path / name).read_text()
