"""A key rotated under a running daemon (issue 52): the HAProxy agent and the Netdata job read the key file again
when it changes (a new inode, size or mtime), as the check does on every run; a new file that cannot be used is
said and the connection before it kept. Against the simulator's llama.cpp flavour started with --api-key, which
refuses /metrics (401) without the key it holds now."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.cli.connection import Rotating
from check_vllm.cli.option_table import AGENT
from check_vllm.contract.defaults import SETTINGS, Options
from check_vllm.contract.vocab import NO_METRICS
from check_vllm.haproxy.cli import parser
from check_vllm.haproxy.watch import Watch
from vllm_simulator import LlamacppOptions, Simulator

OLD, NEW = "sk-rotation-old-1111", "sk-rotation-new-2222"


@pytest.fixture
def guarded() -> Iterator[Simulator]:
    sim = Simulator(port=0, flavour="llamacpp", scenario="busy", llamacpp=LlamacppOptions(api_key=OLD)).start()
    try:
        yield sim
    finally:
        sim.stop()


def rotate_file(path: Path, key: str) -> None:
    """As an operator or a secrets agent does: a new file renamed over the old one."""
    new = path.with_suffix(".new")
    new.write_text(key + "\n")
    new.chmod(0o600)
    os.replace(new, path)


def rotate_server(sim: Simulator, key: str) -> None:
    server = sim.llamacpp
    assert server is not None
    server.options = dataclasses.replace(server.options, api_key=key)


def agent(sim: Simulator, key: Path, said: list[str]) -> Watch:
    args = parser().parse_args(["-u", sim.url, "--api-key-file", str(key)])
    rotating = Rotating(args, AGENT)
    return Watch(rotating.endpoint, SETTINGS, Options(), 1.0, 60.0, say=said.append, fresh=rotating.fresh)


def test_the_agent_reads_a_rotated_key_and_keeps_the_old_one_over_a_bad_file(guarded, tmp_path):
    key = tmp_path / "key"
    rotate_file(key, OLD)
    said: list[str] = []
    watch = agent(guarded, key, said)
    assert watch.judge().word != NO_METRICS
    rotate_server(guarded, NEW)
    refused = watch.judge()
    assert refused.word == NO_METRICS and "the API key was refused" in refused.text, refused.text
    rotate_file(key, NEW)
    assert watch.judge().word != NO_METRICS, said
    assert said.count("the API key or CA file changed: read again") == 1, said
    rotate_file(key, "")  # an empty file: said, and the key before it kept
    assert watch.judge().word != NO_METRICS, said
    assert any("is empty" in s and s.endswith("the connection before it is kept") for s in said), said


def test_the_netdata_job_reads_a_rotated_key(guarded, tmp_path):
    from check_vllm.netdata.collector import JobCollector
    from check_vllm.netdata.config import load

    key = tmp_path / "key"
    rotate_file(key, OLD)
    jobs, problems = load(f"[local]\nurl = {guarded.url}\napi_key_file = {key}\n", 1)
    assert not problems and len(jobs) == 1, problems
    said: list[str] = []
    job = JobCollector(jobs[0], say=said.append)
    assert job.observe()[0].word != NO_METRICS
    rotate_server(guarded, NEW)
    assert job.observe()[0].word == NO_METRICS
    rotate_file(key, NEW)
    assert job.observe()[0].word != NO_METRICS, said
    assert "the API key or CA file changed: read again" in said
