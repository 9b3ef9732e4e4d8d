"""The post-mortem's pure parts (issue 48): which dump each process gets and in what order, the command line
with its secrets masked, the process tree, the README's words and the summary `--post-mortems` lists. The
collection itself runs real dumpers against real processes in tests/host/test_postmortem.py."""

from __future__ import annotations

import pytest

from check_vllm.postmortem import readme, stacks
from check_vllm.postmortem.dumpers import Tools
from check_vllm.postmortem.procs import Proc, age_text, masked, tree

API = Proc(100, 1, "python3", "S", 3700.0, ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"),
           "/usr/bin/python3.11")
CORE = Proc(101, 100, "VLLM::EngineCor", "T", 3650.0, ("VLLM::EngineCore",), "/usr/bin/python3.11")
WORKER = Proc(102, 101, "VLLM::Worker", "S", 3640.0, ("VLLM::Worker",), "/usr/bin/python3.11")
LLAMA = Proc(200, 1, "llama-server", "S", 90.0, ("/opt/llama-server", "-m", "tiny.gguf"), "/opt/llama-server")
ZOMBIE = Proc(300, 100, "python3", "Z", 1.0, (), "")
ALL = Tools("/bin/py-spy", "/usr/bin/gdb", "/usr/bin/nvidia-smi")


def steps(plan: list[stacks.Dump]) -> list[str]:
    return [d.step for d in plan]


def test_python_processes_get_py_spy_first_native_ones_gdb_after_the_page_and_native_frames_last():
    plan = stacks.plan([API, CORE, WORKER, LLAMA, ZOMBIE], ALL)
    assert steps(plan) == [
        "py-spy 100 (python3)", "py-spy 101 (VLLM::EngineCor)", "py-spy 102 (VLLM::Worker)",  # nothing stopped
        "gdb 200 (llama-server)", "nvidia-smi -q",  # after the page: gdb stops what it attaches to
        "py-spy --native 100 (python3)", "py-spy --native 102 (VLLM::Worker)"]  # not the stopped EngineCore
    assert [d.phase for d in plan] == sorted(d.phase for d in plan)
    assert plan[1].argv == ("/bin/py-spy", "dump", "--pid", "101", "--nonblocking")
    assert plan[1].file == "py-spy-101.txt" and plan[-1].file == "py-spy-native-102.txt"
    gdb = plan[3].argv
    assert gdb is not None and gdb[:3] == ("/usr/bin/gdb", "-nx", "-batch") and "thread apply all bt" in gdb
    assert ("-p", "200") == gdb[gdb.index("-p"):gdb.index("-p") + 2]
    assert "already traced by" in plan[3].fails_on, "gdb -batch exits 0 when it cannot attach"


def test_a_missing_tool_is_a_step_that_says_how_to_get_it():
    plan = stacks.plan([API, LLAMA], Tools())
    said = {d.step: d.why_not for d in plan}
    assert all(d.argv is None for d in plan)
    assert said == {"py-spy 100 (python3)": "py-spy not installed: pip install py-spy (or check_vllm[postmortem])",
                    "gdb 200 (llama-server)": "gdb not installed: apt-get install gdb",
                    "nvidia-smi -q": "no nvidia-smi on this host"}


def test_every_dumper_has_a_time_out_of_its_own():
    assert all(0 < d.cap <= 15 for d in stacks.plan([API, CORE, LLAMA], ALL))


@pytest.mark.parametrize(("argv", "shown"), [
    (["vllm", "serve", "--api-key", "sk-123", "--port", "8000"], ["vllm", "serve", "--api-key", "***", "--port", "8000"]),
    (["llama-server", "--api-key=sk-1", "--hf-token", "hf_x"], ["llama-server", "--api-key=***", "--hf-token", "***"]),
    (["x", "--ssl-keyfile", "/k.pem", "--password", "p", "--auth_secret=s"],
     ["x", "--ssl-keyfile", "/k.pem", "--password", "***", "--auth_secret=***"]),
    # not secrets: a tokenizer, a number of tokens
    (["vllm", "--tokenizer", "/m", "--max-num-batched-tokens", "8192"],
     ["vllm", "--tokenizer", "/m", "--max-num-batched-tokens", "8192"]),
    (["x", "--api-key"], ["x", "--api-key"]),
])
def test_secret_options_are_masked_in_every_command_line_the_bundle_keeps(argv, shown):
    assert masked(argv) == shown


def test_the_tree_indents_children_under_their_parent_with_state_and_age():
    text = tree([API, CORE, WORKER])
    lines = text.splitlines()
    assert lines[1].startswith("100      S     1h01m40s") and lines[1].endswith(
        "python3: /venv/bin/python -m vllm.entrypoints.openai.api_server")
    assert "T     1h00m50s       VLLM::EngineCor: VLLM::EngineCore" in lines[2]
    assert "        VLLM::Worker: VLLM::Worker" in lines[3]
    assert age_text(None) == "?" and age_text(90061) == "1d01h01m"


def test_a_command_line_with_a_newline_stays_one_line_of_the_tree():
    p = Proc(5, 1, "python3", "S", 1.0, ("python", "-c", "import x\nx.y()", "--api-key", "k"), "/usr/bin/python3")
    assert tree([p]).splitlines()[1].endswith("python3: python -c import x x.y() --api-key ***")


def test_the_readme_names_each_file_the_steps_and_where_to_report():
    files = [("evidence.json", 10, False), ("metrics.txt", 5, True), ("py-spy-101.txt", 7, False),
             ("gdb-200.txt", 9, False), ("collection.json", 3, False)]
    steps_ = [("evidence", "ok"), ("py-spy 101 (VLLM::EngineCor)", "timed out after 4.1 s (its process group killed)")]
    text = readme.text("20261206T110417Z-100", "2026-12-06 11:04:17 UTC", "gpu1", files, steps_, 4.6, 20.0)
    assert text.startswith("check_vllm post-mortem 20261206T110417Z-100\n")
    assert "metrics.txt" in text and "[5 bytes, cut by the size cap]" in text
    assert "py-spy dump --nonblocking" in text and "gdb's `thread apply all bt`" in text
    assert "py-spy 101 (VLLM::EngineCor): timed out after 4.1 s" in text
    assert "tar czf 20261206T110417Z-100.tar.gz 20261206T110417Z-100" in text
    assert "https://github.com/vllm-project/vllm/issues" in text and "ggml-org/llama.cpp" in text
    assert all(readme.what(name) for name, _, _ in files)
    assert "process 101" in readme.what("proc-101.txt")


def test_the_summary_is_the_verdict_and_what_did_not_go_well():
    steps_ = [("evidence", "ok"), ("py-spy 7 (x)", "ok in 0.1 s"),
              ("gdb 8 (y)", "timed out after 3.0 s (its process group killed)"), ("nvidia-smi -q", "no nvidia-smi")]
    said = readme.summary({"verdict": "stuck", "status": "VLLM CRITICAL - stuck"}, steps_, 3.4)
    assert said == "stuck; 2/4 steps ok in 3.4 s; gdb 8 (y): timed out after 3.0 s; nvidia-smi -q: no nvidia-smi"
    assert readme.summary({"status": "VLLM CRITICAL - stuck\nforged"}, [], 0.0).startswith(
        "VLLM CRITICAL - stuck forged; 0/0")
    assert readme.summary({}, [], 0.0).startswith("?;")


def test_a_command_line_read_as_a_tuple_names_its_engine():
    """/proc's argv reaches the post-mortem as a tuple (procs.Proc): `vllm serve` is vLLM's there too."""
    from check_vllm.contract.engines import VLLM
    from check_vllm.server.processes import engine_of

    assert engine_of(("/opt/venv/bin/vllm", "serve", "m", "--port", "8000")) is VLLM
    assert engine_of(["/opt/venv/bin/vllm", "serve", "m"]) is VLLM


def test_the_servers_version_is_its_own_word_never_a_run_of_its_binary():
    from check_vllm.postmortem import versions

    assert versions.answered("/version", 200, b'{"version": "0.32.0"}') == "/version: 0.32.0"
    assert versions.answered("/props", 200, b'{"build_info": "b11434-7b1c3f2"}') == "/props: b11434-7b1c3f2"
    assert versions.answered("/version", 404, b'{"version": "0.32.0"}') is None
    assert versions.answered("/version", 200, b"<html>") is None
    assert versions.answered("/props", 200, b'{"build_info": ""}') is None
    assert "the server says /props: b11434" in versions.text([], "/props: b11434")
