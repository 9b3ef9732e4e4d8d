"""The check end to end on a server that is loading: a real process with vLLM's command line that binds
the URL's port and never listens (what vLLM does while it builds its engine), started by the test, not by
check_vllm_restart. Exact status lines and exit codes."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from check_vllm.contract.defaults import Options
from check_vllm.server import host, processes
from tests.rig.loading_vllm import PROXY, Loaders, free_port, loaders

PERF = (" | kv_cache_usage=U;;;0;100 prompt_tokens_per_second=U;;;0 running=U;;;0 stalled_seconds=U;;;0 "
        "steps_per_second=U;;;0 tokens_per_second=U;;;0 waiting=U;;;0")


@pytest.fixture
def loader(tmp_path: Path) -> Iterator[Loaders]:
    yield from loaders(tmp_path)


def norm(line: str) -> str:
    return re.sub(r"\d+(\.\d+)? s\b", "<N>", line)


def test_a_server_someone_else_started_is_starting_within_the_grace(run_check, loader):
    port = free_port()
    proc = loader(port)
    r = run_check("-u", f"http://127.0.0.1:{port}")
    assert norm(r.first) == (f"VLLM WARNING - starting: vLLM process {proc.pid} started <N> ago, not serving yet "
                             f"(grace <N>; connection refused (http://127.0.0.1:{port})){PERF}")
    assert r.code == 1


def test_an_sglang_server_that_is_loading_is_starting_named_by_its_engine(run_check, loader):
    """SGLang listens only once its schedulers have loaded the model (srt/entrypoints/http_server.py
    launch_server: the HTTP server starts after Engine._launch_subprocesses): the host's witness knows
    `sglang serve`, so a load is starting, not down (issue 40)."""
    port = free_port()
    proc = loader(port, "sglang")
    r = run_check("-u", f"http://127.0.0.1:{port}", "--engine", "sglang")
    assert norm(r.first) == (f"SGLANG WARNING - starting: SGLang process {proc.pid} started <N> ago, not serving "
                             f"yet (grace <N>; connection refused (http://127.0.0.1:{port})){PERF}")
    assert r.code == 1


def test_a_server_that_never_finishes_starting_is_down_after_the_grace(run_check, loader):
    port = free_port()
    proc = loader(port)
    time.sleep(1.2)
    r = run_check("-u", f"http://localhost:{port}", "--start-grace", "1")
    assert norm(r.first) == (f"VLLM CRITICAL - down: not serving <N> after its start (vLLM process {proc.pid}, "
                             f"grace <N>; connection refused (http://localhost:{port})){PERF}")
    assert r.code == 2


def test_a_crash_loop_is_down_within_three_starts(run_check, loader):
    port = free_port()
    seen = []
    for _ in range(3):
        proc = loader(port)
        r = run_check("-u", f"http://127.0.0.1:{port}")
        seen.append((r.word, r.code))
        proc.kill()
        proc.wait()
    assert seen == [("starting", 1), ("starting", 1), ("down", 2)]
    assert norm(r.first).startswith(f"VLLM CRITICAL - down: crash loop: 3 server processes started in <N>, "
                                    f"none has served (newest {proc.pid}; connection refused")


def test_a_server_that_served_and_is_stopping_is_stopping_then_down_after_the_stop_grace(run_check, loader):
    port = free_port()
    proc = loader.serving(port)
    url = f"http://127.0.0.1:{port}"
    assert run_check("-u", url, "--min-gap", "0").code == 0  # it served
    loader.stop(proc)
    r = run_check("-u", url, "--min-gap", "0")
    assert r.first == (f"VLLM WARNING - stopping: vLLM process {proc.pid} served and still lives, refusing for "
                       f"0.0 s (grace 120 s; connection refused ({url})){PERF}")
    assert r.code == 1
    time.sleep(1.2)
    late = run_check("-u", url, "--min-gap", "0", "--stop-grace", "1")  # counted from the first refusal
    assert norm(late.first) == (f"VLLM CRITICAL - down: refusing <N> while vLLM process {proc.pid} lives (it "
                                f"served; stop grace <N>; connection refused ({url})){PERF}")
    assert late.code == 2
    proc.kill()
    proc.wait()
    held = run_check("-u", url, "--min-gap", "0")  # exited, nothing started yet: within 120 s the stop goes on
    assert norm(held.first) == (f"VLLM WARNING - stopping: server process {proc.pid} served, stopped and exited, "
                                f"no new process yet; refusing for <N> (grace <N>; connection refused ({url}))"
                                f"{PERF}")
    assert held.code == 1
    gone = run_check("-u", url, "--min-gap", "0", "--stop-grace", "1")  # past its grace: nothing listens
    assert gone.first == f"VLLM CRITICAL - down: connection refused ({url}){PERF}"
    assert gone.code == 2


def test_a_restart_between_its_stop_and_its_start_is_starting_not_down(run_check, loader, tmp_path):
    """`supervisorctl restart`: the old process is gone and the next not spawned yet, for milliseconds. A run
    whose look at the host falls into that gap right after the server was up looks again a second later
    and finds the next process starting (here `supervisorctl pid`'s 0, then the new pid); none: down."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    old = loader.serving(port)
    assert run_check("-u", url, "--min-gap", "0").code == 0
    old.kill()
    old.wait()
    new = loader(port)
    looks = tmp_path / "looks"
    gap = f"echo look >> {looks}; if [ $(wc -l < {looks}) -gt 1 ]; then echo {new.pid}; else echo 0; fi"
    r = run_check("-u", url, "--min-gap", "0", "--pid-command", gap)
    assert norm(r.first) == (f"VLLM WARNING - starting: vLLM process {new.pid} (from its pid command) started <N> "
                             f"ago, not serving yet (grace <N>; connection refused ({url})){PERF}")
    assert (r.code, looks.read_text().count("look")) == (1, 2)
    new.kill()
    new.wait()
    back = loader.serving(port)
    assert run_check("-u", url, "--min-gap", "0").code == 0
    back.kill()
    back.wait()
    looks.unlink()
    dead = run_check("-u", url, "--min-gap", "0", "--pid-command", f"echo look >> {looks}; echo 0")
    assert (dead.first, dead.code) == (f"VLLM CRITICAL - down: connection refused ({url}){PERF}", 2)
    assert looks.read_text().count("look") == 2
    again = run_check("-u", url, "--min-gap", "0", "--pid-command", f"echo look >> {looks}; echo 0")
    assert (again.word, looks.read_text().count("look")) == ("down", 3)  # already down: one look


def test_a_vllm_process_on_another_port_is_not_the_server(run_check, loader):
    port, other = free_port(), free_port()
    loader(other)
    r = run_check("-u", f"http://127.0.0.1:{port}")
    assert r.first == f"VLLM CRITICAL - down: connection refused (http://127.0.0.1:{port}){PERF}"


def test_the_operator_names_the_process_with_a_pid_file_or_a_command(run_check, loader, tmp_path):
    port = free_port()
    proc = loader(port)
    pid_file = tmp_path / "vllm.pid"
    pid_file.write_text(f"{proc.pid}\n")
    by_file = run_check("-u", f"http://127.0.0.1:{port}", "--pid-file", str(pid_file))
    assert norm(by_file.status).startswith(f"starting: vLLM process {proc.pid} (from its pid file) started <N> ago")
    by_command = run_check("-u", f"http://127.0.0.1:{port}", "--pid-command", f"echo pid={proc.pid}")
    assert norm(by_command.status).startswith(f"starting: vLLM process {proc.pid} (from its pid command)")
    stopped = run_check("-u", f"http://127.0.0.1:{port}", "--pid-command", "echo 0")  # supervisorctl pid: stopped
    assert (stopped.word, stopped.code) == ("down", 2)
    broken = run_check("-u", f"http://127.0.0.1:{port}", "--pid-command", "exit 3")
    assert (broken.word, broken.code) == ("down", 2)
    assert "server process unknown: --pid-command exited 3" in broken.status


def test_the_host_is_a_witness_only_for_its_own_addresses():
    assert host.is_local("http://127.0.0.1:8000") and host.is_local("http://LOCALHOST:8000")
    assert host.is_local("http://[::1]:8000") or not socket.has_ipv6
    assert not host.is_local("http://192.0.2.10:8000")  # TEST-NET-1: not this host (a bind, no packet sent)
    assert host.witness("http://192.0.2.10:8000", Options()) is None


def test_command_lines_of_the_api_server():
    assert processes.serves_port(["/v/bin/python3", "/v/bin/vllm", "serve", "m", "--port", "8001"], 8001)
    assert processes.serves_port(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], 8000)
    assert processes.serves_port(["vllm", "serve", "m", "--port=9000"], 9000)
    assert not processes.serves_port(["vllm", "serve", "m"], 8001)
    assert not processes.serves_port(["python3", "-m", "vllm_simulator", "--port", "8000"], 8000)
    assert not processes.serves_port(["VLLM::EngineCore"], 8000)


# --------------------------------------------------------------------------- issue 27: four ways the path got a server wrong


def test_a_server_whose_port_is_only_in_its_config_file_is_starting(run_check, loader, tmp_path):
    """`vllm serve --config vllm.yaml` with `port:` in the YAML: f2970e2 found no process for the port and read
    CRITICAL down while it loaded. The host reads the port from the file (relative to the server's own folder)."""
    port = free_port()
    proc = loader.with_config(port, tmp_path / "vllm.yaml")
    r = run_check("-u", f"http://127.0.0.1:{port}")
    assert norm(r.first) == (f"VLLM WARNING - starting: vLLM process {proc.pid} started <N> ago, not serving yet "
                             f"(grace <N>; connection refused (http://127.0.0.1:{port})){PERF}")
    assert r.code == 1




def test_behind_a_proxy_on_this_host_the_check_names_it_and_how_to_witness_the_server(run_check, loader):
    """An auth or TLS proxy on this host answers 502 while vLLM, behind it on another port, loads. Without being
    told which vLLM is behind it (the proxy may front another host), the host is no witness, and the output says
    what holds the port and how to name the server (issue 38: f646aaa said nothing); --server-port names it."""
    import subprocess
    import sys

    front, back = free_port(), free_port()
    proc = loader(back)
    proxy = subprocess.Popen([sys.executable, "-c", PROXY, str(front)])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", front), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{front}"
        # with no option, what the host sees depends on the other engine servers here (the host tier, run alone,
        # tests it: tests/host/test_host_witness.py); named, the server is this one whatever else runs
        named = run_check("-u", url, "--server-port", str(back))
        assert norm(named.first).startswith(f"VLLM WARNING - starting: vLLM process {proc.pid} started <N> ago, "
                                            "not serving yet"), named.first
        by_pid = run_check("-u", url, "--pid-command", f"echo {proc.pid}")
        assert norm(by_pid.first).startswith(f"VLLM WARNING - starting: vLLM process {proc.pid} (from its pid "
                                             f"command) started <N> ago, not serving yet"), by_pid.first
    finally:
        proxy.kill()
        proxy.wait()


def test_a_vllm_process_in_another_network_namespace_is_no_proof_of_none(monkeypatch):
    """A container published with `-p 8001:8000` runs vLLM in its own network namespace: its port is not the
    URL's, so finding no process for the URL's port proves nothing (f2970e2: down at once, the handler restarted
    it mid-load). The host says what it cannot see; the check concludes what a remote one would."""
    from check_vllm.server import processes as p

    monkeypatch.setattr(p.procfs, "pids", lambda: [4242])
    monkeypatch.setattr(p.procfs, "cmdline", lambda pid: ["python3", "-m", p.API_MODULE, "--port", "8000"])
    monkeypatch.setattr(p, "_netns", lambda pid: "net:[1]" if pid == "self" else "net:[2]")
    seen = p.by_command_line(8001)
    assert seen is not None and seen.process is None
    assert seen.error == ("vLLM process 4242: it runs in another network namespace: no proof there is none "
                          f"({p.ADVICE})")
    monkeypatch.setattr(p, "_netns", lambda pid: "net:[1]")
    assert p.by_command_line(8001) == p.Witness()  # the same namespace: a vLLM on another port is not ours


def test_an_engine_that_died_under_its_api_server_is_down_in_the_words_of_0_33(run_check, sim):
    """VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1: /metrics answers, completions 500 with 0.33's words (no engine named),
    /health 503. f2970e2 read it as an unanswered probe: stalling, stuck only after the proof."""
    sim.set_scenario("engine_dead")
    r = run_check("-u", sim.url)
    assert r.first.startswith("VLLM CRITICAL - down: engine died (completion answered HTTP 500: The server had an "
                              "error while processing your request.; GET /health answered 503)"), r.first
    assert r.code == 2


def test_the_collector_and_the_agent_date_a_process_on_the_hosts_clock(loader):
    """f2970e2: their in-process memory dated now on time.monotonic(), the process's start on CLOCK_BOOTTIME:
    every reading said "started 0.0 s ago", so a server hanging while it loads was starting for ever."""
    from check_vllm.contract.defaults import OPTIONS, SETTINGS
    from check_vllm.haproxy.watch import Watch
    from check_vllm.netdata.collector import JobCollector
    from check_vllm.netdata.config import Job
    from check_vllm.server.fetch import Endpoint

    port = free_port()
    loader(port)
    time.sleep(1.3)
    url = f"http://127.0.0.1:{port}"
    tick, _, _ = JobCollector(Job("t", url), say=lambda m: None).observe()
    watch = Watch(Endpoint(url), SETTINGS._replace(start_grace=1.0), OPTIONS._replace(reread=False), 1.0, 60.0,
                  say=lambda m: None)
    agent = watch.judge()
    assert tick.word == "starting" and re.search(r"started 1\.\d s ago", tick.text), tick.summary
    assert (agent.word, agent.code) == ("down", 2), agent.summary  # past its 1 s grace: the agent marks it down
    assert agent.text.startswith("not serving 1."), agent.summary
