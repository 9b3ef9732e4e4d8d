"""check_vllm_agent's TCP side against hostile peers (issue 30, class 5): a peer that trickles bytes holds
nothing for long, and with --allow a peer from another address is closed at once, unanswered."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from check_vllm.cli.peers import allowed, parse_allow
from check_vllm.haproxy import listen
from check_vllm.haproxy.listen import AgentServer
from tests.rig.scripts import script
from tests.rig.waiting import wait_for

LINE = "up ready 100% #idle: test\n"


@pytest.fixture
def agent(request) -> Iterator[AgentServer]:
    server = AgentServer(("127.0.0.1", 0), lambda: LINE, getattr(request, "param", ()))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def ask(port: int, source: str = "127.0.0.1", timeout: float = 5.0) -> tuple[bytes, float]:
    """What the agent says to one connection from `source`, and how long it took to close."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
        got = b""
        try:
            while chunk := s.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
    return got, time.monotonic() - t0


def trickle(port: int, stop: threading.Event, closed: list[float]) -> None:
    """A peer that never closes and sends a byte every 0.3 s, whatever it is told: each recv of the agent
    gets data in time. It notes when the agent has closed the connection (a send is reset)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        while not stop.wait(0.3):
            try:
                s.sendall(b"x")
            except OSError:
                closed.append(time.monotonic() - t0)
                return


def test_tricklers_hold_no_slot_past_the_deadline_and_a_real_peer_is_answered(agent: AgentServer):
    port = agent.server_address[1]
    stop, closed = threading.Event(), []
    peers = [threading.Thread(target=trickle, args=(port, stop, closed), daemon=True)
             for _ in range(listen.MAX_CLIENTS + 8)]
    try:
        for p in peers:
            p.start()
        time.sleep(0.5)  # every slot taken, if a trickler could take one for good
        got, _ = ask(port)
        assert got == LINE.encode(), got  # answered is the point; how fast a loaded machine answers proves nothing
        wait_for("every trickling peer closed", lambda: len(closed) == len(peers), 60,
                 diag=lambda: f"{len(peers) - len(closed)} trickling peers still connected")
        # the bound is the product's own figure: listen.DEADLINE (1 s in all after the reply) x5; a trickler the
        # deadline missed is never closed (each of its bytes arrives in time)
        assert max(closed) < 5 * listen.DEADLINE, closed
    finally:
        stop.set()
        for p in peers:
            p.join(5)


@pytest.mark.parametrize("agent", [parse_allow("127.0.0.1")], indirect=True)
def test_a_peer_outside_the_allow_list_is_closed_unanswered(agent: AgentServer):
    port = agent.server_address[1]
    got, _ = ask(port, source="127.0.0.2")
    assert got == b"", got  # unanswered is the point; how fast a loaded machine closes it proves nothing
    assert ask(port)[0] == LINE.encode()


def test_allow_list_rules():
    nets = parse_allow("10.0.0.5, 10.0.1.0/24,::1")
    assert allowed("10.0.0.5", nets) and allowed("10.0.1.77", nets) and allowed("::1", nets)
    assert allowed("::ffff:10.0.1.9", nets)  # an IPv4 peer of a dual-stack listener
    assert not allowed("127.0.0.1", nets) and not allowed("10.0.0.6", nets) and not allowed("garbage", nets)
    for bad in ("", "10.0.0.300", "host.example"):
        with pytest.raises(ValueError):
            parse_allow(bad)


def test_a_bad_allow_is_a_usage_error():
    done = subprocess.run([script("check_vllm_agent"), "--allow", "10.0.0.300", "--listen", "127.0.0.1:1"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "--allow '10.0.0.300': not an IP address" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_the_agent_answers_and_stops_on_sigterm_while_its_first_reading_hangs():
    """Issue 38: the agent judged once before it listened, so a first reading that hung (a server that accepts
    and says nothing; before, a host look that blocked) left HAProxy and the kubelet unanswered, and SIGTERM
    unheard. Now both listeners answer while the first reading still hangs (no verdict yet: the agent is starting),
    and SIGTERM ends it then. No clock decides: the first reading is given --timeout 600 against a server silent for
    as long, so an answer, or an exit, within the waits' ceilings can only have come while it hung."""
    from tests.rig.loopback import RawServer
    from tests.rig.ports import free_port

    silent = RawServer(lambda conn, stop: stop.wait(600)).__enter__()
    port, probes = free_port(), free_port()
    proc = subprocess.Popen([script("check_vllm_agent"), "-u", silent.url, "--listen",
                             f"127.0.0.1:{port}", "--probe-listen", f"127.0.0.1:{probes}", "--timeout", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def answer() -> bytes:
            try:
                return ask(port, timeout=10)[0]
            except OSError:  # not listening yet
                return b""

        got = wait_for("the agent's first answer", answer, 60, interval=0.05)
        assert got.startswith(b"drain") or got.startswith(b"up"), got
        with socket.create_connection(("127.0.0.1", probes), timeout=10) as s:
            s.sendall(b"GET /livez HTTP/1.0\r\n\r\n")
            reply = b""
            while chunk := s.recv(4096):  # HTTP/1.0: the agent closes after its answer
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 200") and b"liveness pass in spite of: " in reply, reply
        wait_for("the first reading to reach the silent server", lambda: silent.accepted, 60)  # and there it hangs
        proc.terminate()
        assert proc.wait(60) == 0, "SIGTERM unheard while the first reading hangs"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        silent.__exit__()
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
