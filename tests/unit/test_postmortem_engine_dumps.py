"""The engine's own stack dumps in the bundle (issue 51), against files shaped as the engines write them:
vLLM 0.33 and 0.34 (vllm/utils/watch_dog.py ThreadedWatchDog.dump_stack, the same in both: `VLLM_STACK_DUMP_for_
{engine_N|worker_N}_{pid}.log`, appended `>>> Call stack dump #N at <ctime> due to <reason>`, faulthandler's all
threads, 64 `=`), the option as vLLM's parser reads it (vllm/engine/arg_utils.py, vllm/utils/argparse_utils.py),
and SGLang 0.5.23's watchdog lines on its stderr (srt/utils/watchdog.py, srt/utils/cudacore_pyspy_dump_utils.py).
Only regular files, never through a link, with one link, of the server's user or root; newest first, bounded."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.postmortem import engine_dumps, readme
from check_vllm.postmortem.engine_dumps import collect, dump_dir, read_dumps, sglang_dump
from check_vllm.postmortem.procs import Proc

#: The EngineCore's file after a stall and the SIGTERM of its restart (the handler before core.py's signal_handler).
VLLM_ENGINE = """
>>> Call stack dump #1 at Sun Dec  6 11:16:02 2026 due to feed timeout

Current thread 0x00007f3a0effd6c0 (most recent call first):
  File "/usr/local/lib/python3.12/dist-packages/vllm/utils/watch_dog.py", line 101 in dump_stack
  File "/usr/local/lib/python3.12/dist-packages/vllm/utils/watch_dog.py", line 83 in handle_failure
  File "/usr/local/lib/python3.12/dist-packages/vllm/utils/watch_dog.py", line 133 in _check_loop
  File "/usr/lib/python3.12/threading.py", line 1010 in run

Thread 0x00007f3c8e9fe740 (most recent call first):
  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/streams.py", line 224 in synchronize
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2731 in execute_model
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1857 in _process_engine_step
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1742 in run_engine_core

================================================================

>>> Call stack dump #2 at Sun Dec  6 11:17:40 2026 due to SIGTERM

Current thread 0x00007f3c8e9fe740 (most recent call first):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1703 in signal_handler

================================================================
"""
VLLM_WORKER = VLLM_ENGINE.replace("SIGTERM", "shutdown").replace("run_engine_core", "worker_busy_loop")
#: A scheduler stuck in a forward pass: the soft watchdog's debug info, py-spy's dump, the timeout line.
SGLANG_LOG = """[2026-12-06 11:14:02] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK
[2026-12-06 11:14:05] Decode batch, #running-req: 2, #token: 812, token usage: 0.01, cuda graph: True, gen throughput (token/s): 95.31, #queue-req: 0
[2026-12-06 11:19:05] Scheduler debug info:
self.cur_batch_for_debug.batch_size()=2
[2026-12-06 11:19:06] Pyspy dump for PID 4243 (py-spy dump --native --pid 4243):
Process 4243: sglang::scheduler
Python v3.12.3 (/usr/bin/python3.12)

Thread 4243 (active): "MainThread"
    synchronize (torch/cuda/__init__.py:985)
    event_loop_overlap (sglang/srt/managers/scheduler.py:1120)
    run_scheduler_process (sglang/srt/managers/scheduler.py:6330)

[2026-12-06 11:19:06] Scheduler watchdog timeout (self.watchdog_timeout=60.0, self.soft=True)


"""
ME = os.getpid()
OWNERS = {0, os.geteuid()}


def vllm(*options: str) -> Proc:
    return Proc(ME, 1, "vllm", "S", 60.0, ("/venv/bin/vllm", "serve", "/models/m", *options), "/usr/bin/python3.12")


@pytest.mark.parametrize(("argv", "found"), [
    (["--watchdog-config", '{"dump_dir": "/d", "timeout": 60}'], "/d"),
    (['--watchdog-config={"dump_dir": "/d"}'], "/d"),
    (["--watchdog_config", '{"dump_dir": "/d"}'], "/d"),  # `_` and `-` alike before the dot
    (["--watchdog-config.dump_dir", "/d"], "/d"),
    (["--watchdog-config.dump_dir=/d", "--watchdog-config.timeout", "60"], "/d"),
    (["--watchdog-config", '{"dump_dir": "/a"}', "--watchdog-config", '{"dump_dir": "/b"}'], "/b"),  # the last
    (["--watchdog-config.dump_dir", "/b", "--watchdog-config", '{"dump_dir": "/a"}'], "/b"),  # dotted go after
    (["--watchdog-config", '{"dump_dir": "/a"}', "--watchdog-config.timeout", "60"], None),  # replaced whole
    (["--watchdog-config", '{"dump_dir": ""}'], None),  # vLLM's default: no watchdog
    (["--watchdog-config", "not json"], None), (["--watchdog-config"], None), (["--port", "8000"], None),
])
def test_the_dump_dir_is_read_as_vllms_parser_reads_it(argv, found):
    assert dump_dir(["vllm", "serve", "m", *argv]) == found


@pytest.fixture
def dumps(tmp_path: Path) -> Path:
    where = tmp_path / "dumps"
    where.mkdir()
    (where / f"VLLM_STACK_DUMP_for_engine_0_{ME}.log").write_text(VLLM_ENGINE)
    (where / "VLLM_STACK_DUMP_for_worker_0_4711.log").write_text(VLLM_WORKER)
    (where / "unrelated.log").write_text("not a dump\n")
    os.utime(where / "VLLM_STACK_DUMP_for_worker_0_4711.log", (2e9, 2e9))  # newer, but not this server's
    return where


def test_this_servers_dumps_come_first_then_the_newest_and_nothing_else(dumps: Path):
    files, notes = read_dumps(str(dumps), OWNERS, {ME})
    assert [n for n, _ in files] == [f"VLLM_STACK_DUMP_for_engine_0_{ME}.log", "VLLM_STACK_DUMP_for_worker_0_4711.log"]
    assert files[0][1].decode() == VLLM_ENGINE and notes == []
    assert readme.what(files[0][0]).startswith("vLLM's own all-thread stack dump")


def test_a_link_a_fifo_a_hard_link_and_another_users_file_are_refused(dumps: Path, tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("root:$6$hash\n")
    (dumps / "VLLM_STACK_DUMP_for_engine_1_1.log").symlink_to(secret)
    os.mkfifo(dumps / "VLLM_STACK_DUMP_for_engine_2_2.log")
    os.link(secret, dumps / "VLLM_STACK_DUMP_for_engine_3_3.log")
    files, notes = read_dumps(str(dumps), OWNERS, {ME})
    assert all(b"$6$" not in data for _, data in files) and len(files) == 2
    assert sorted(notes) == ["refused VLLM_STACK_DUMP_for_engine_1_1.log: a symlink, not followed",
                             "refused VLLM_STACK_DUMP_for_engine_2_2.log: not a regular file",
                             "refused VLLM_STACK_DUMP_for_engine_3_3.log: 2 hard links"]
    _, theirs = read_dumps(str(dumps), {12345}, {ME})
    assert f"refused VLLM_STACK_DUMP_for_engine_0_{ME}.log: owned by uid {os.geteuid()}, not the server's user " \
           "or root" in theirs
    link = tmp_path / "linked"
    link.symlink_to(dumps)
    assert read_dumps(str(link), OWNERS, {ME}) == ([], ["not read: a symlink, not followed"])


def test_the_count_and_each_files_size_are_bounded_keeping_its_end(dumps: Path, monkeypatch):
    for n in range(12):
        (dumps / f"VLLM_STACK_DUMP_for_worker_{n}_9{n}.log").write_text(f"worker {n}\n")
        os.utime(dumps / f"VLLM_STACK_DUMP_for_worker_{n}_9{n}.log", (1e9 + n, 1e9 + n))
    files, notes = read_dumps(str(dumps), OWNERS, {ME})
    assert len(files) == engine_dumps.MAX_FILES and notes == ["6 older left"]
    assert [n for n, _ in files][2:4] == ["VLLM_STACK_DUMP_for_worker_11_911.log", "VLLM_STACK_DUMP_for_worker_10_910.log"]
    monkeypatch.setattr(engine_dumps, "FILE_MAX", 400)
    [(_, cut), *_] = read_dumps(str(dumps), OWNERS, {ME})[0]
    assert cut.startswith(b"[check_vllm: its first ") and cut.endswith(b"=" * 64 + b"\n") and len(cut) < 500
    assert b">>> Call stack dump #2" in cut and b"#1 at" not in cut, "the newest dump is the file's end"


def test_collect_names_the_dump_dir_and_hints_it_where_vllm_has_none(dumps: Path):
    files, said = collect([vllm("--watchdog-config", f'{{"dump_dir": "{dumps}"}}')])
    assert said == f"ok: vLLM's watchdog dump_dir {dumps}: 2 taken" and len(files) == 2
    files, said = collect([vllm()])
    assert files == [] and said == ("none: vLLM without a watchdog dump_dir on its command line (vLLM 0.33+ writes "
                                    "its own stack dumps with --watchdog-config '{\"dump_dir\": DIR}')")
    assert collect([vllm("--watchdog-config.dump_dir", str(dumps / "none"))])[1].endswith(
        ": not read: No such file or directory")
    (dumps.parent / "empty").mkdir()
    assert collect([vllm("--watchdog-config.dump_dir", str(dumps.parent / "empty"))]) == (
        [], f"none: vLLM's watchdog dump_dir {dumps.parent / 'empty'}: no dump in it yet")
    llama = Proc(ME, 1, "llama-server", "S", 1.0, ("/opt/llama-server", "-m", "x.gguf"), "/opt/llama-server")
    assert collect([llama]) == ([], "ok: nothing to take (this engine writes no stack dumps of its own)")
    assert collect([]) == ([], "ok: nothing to take (no process here)")


@pytest.fixture
def child(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A process whose working directory is tmp_path and whose stderr is tmp_path/sglang.log."""
    (tmp_path / "sglang.log").write_text(SGLANG_LOG)
    with open(tmp_path / "sglang.log", "a") as log:
        proc = subprocess.Popen(["sleep", "60"], cwd=tmp_path, stderr=log, stdout=subprocess.PIPE)
    yield proc
    proc.kill()
    proc.wait()


def test_a_relative_dump_dir_is_the_servers_working_directorys(child: subprocess.Popen, tmp_path: Path):
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / f"VLLM_STACK_DUMP_for_engine_0_{child.pid}.log").write_text(VLLM_ENGINE)
    proc = Proc(child.pid, ME, "sleep", "S", 1.0, ("vllm", "serve", "m", "--watchdog-config.dump_dir", "rel"), "")
    files, said = collect([proc])
    assert [n for n, _ in files] == [f"VLLM_STACK_DUMP_for_engine_0_{child.pid}.log"] and said.endswith(": 1 taken")


def test_sglangs_watchdog_dump_is_taken_from_its_stderr(child: subprocess.Popen, tmp_path: Path):
    proc = Proc(child.pid, ME, "python3", "S", 1.0, ("python3", "-m", "sglang.launch_server", "--port", "30000"), "")
    files, said = collect([proc])
    assert said == f"ok: SGLang's log {tmp_path / 'sglang.log'}: its watchdog's dump taken"
    [(name, data)] = files
    assert name == f"sglang-log-{child.pid}.txt" and readme.what(name).startswith("the tail of SGLang's log")
    assert data.decode() == SGLANG_LOG, "from CONTEXT_LINES before its first watchdog line: here the whole log"
    scheduler = Proc(child.pid, ME, "sglang::schedul", "S", 1.0, ("sglang::scheduler_TP0",), "")
    assert collect([proc, scheduler])[0] == files, "one log, taken once"


def test_sglangs_log_without_a_dump_and_one_that_goes_to_a_pipe(tmp_path: Path):
    quiet = subprocess.Popen(["sleep", "60"], stderr=open(tmp_path / "quiet.log", "w"))
    piped = subprocess.Popen(["sleep", "60"], stderr=subprocess.PIPE)
    try:
        argv = ("python3", "-m", "sglang.launch_server")
        files, said = collect([Proc(quiet.pid, ME, "python3", "S", 1.0, argv, "")])
        assert files == [] and said.startswith("none: SGLang's log ") and "no watchdog dump in its last 0 bytes" in said
        files, said = collect([Proc(piped.pid, ME, "python3", "S", 1.0, argv, "")])
        assert files == [] and said.startswith("none: SGLang logs to pipe:[") and "journald, docker logs" in said
    finally:
        for proc in (quiet, piped):
            proc.kill()
            proc.wait()


def test_sglang_dump_keeps_the_lines_before_its_first_watchdog_line():
    noise = "".join(f"[2026-12-06 11:1{n % 10}:00] Decode batch, #running-req: 1\n" for n in range(100))
    kept = sglang_dump((noise + SGLANG_LOG).encode())
    assert kept is not None and kept.endswith(SGLANG_LOG.encode())
    first = SGLANG_LOG.index("Pyspy dump for PID")
    assert kept.count(b"\n") == engine_dumps.CONTEXT_LINES + SGLANG_LOG[first:].count("\n")
    assert sglang_dump(noise.encode()) is None


def test_a_control_character_in_a_server_named_path_cannot_forge_a_line(tmp_path: Path):
    files, said = collect([vllm("--watchdog-config.dump_dir", "/nowhere\nsteps: forged")])
    assert "\n" not in said and files == []
