"""check_vllm_agent's command line: HAProxy's agent-check answered from check_vllm's verdicts.

Exit codes: 0 after SIGTERM or SIGINT, 1 when it cannot listen, 2 for bad usage (a daemon, not a plugin).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from check_vllm import __version__
from check_vllm.cli import option_table
from check_vllm.cli.args import Parser, UsageError, check_url, number
from check_vllm.cli.option_table import AGENT
from check_vllm.contract.defaults import SETTINGS
from check_vllm.probes.answers import AGENT_PORT, host_port

from . import exposition, reply

if TYPE_CHECKING:
    from check_vllm.cli.peers import Network
    from check_vllm.probes.answers import Seen
    from check_vllm.probes.httpget import Page, ProbeServer

PROG = AGENT
DEFAULT_LISTEN = "127.0.0.1:5555"
#: HAProxy's own agent-inter default is 2 s: one reading per HAProxy connection, however many balancers.
DEFAULT_INTERVAL = 2.0


def epilog() -> str:
    """The reply of every verdict and state, from the one table (check_vllm.contract.rotation.TABLE, worded by check_vllm.haproxy.reply)."""
    lines = ["replies (verdict, state -> what HAProxy is told; then '#' and the verdict's text):"]
    lines += [f"  {word:<13} {state:<9} {words}" for word, state, words in reply.rows()]
    lines += ["", "A connection never causes a request to the backend: it gets the latest verdict, judged every "
              "--interval.", "The idle completion (one 1-token completion) is sent only when /metrics shows no work, "
              "at most once per --idle-completion-every.", "Exit codes: 0 stopped by SIGTERM/SIGINT, 1 cannot listen, 2 bad "
              "usage. The API key is read from $VLLM_API_KEY or --api-key-file."]
    return "\n".join(lines) + "\n"



def parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Answer HAProxy's agent-check for an LLM backend (vLLM, llama.cpp, SGLang): drain at a first sign, "
               "down only on proof.", epilog=epilog(),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    option_table.add(p.add_argument_group("backend"), AGENT, option_table.SERVER)
    a = p.add_argument_group("agent")
    a.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help="address for HAProxy's agent-port ([::1]:PORT for IPv6; default: %(default)s)")
    a.add_argument("--allow", action="append", metavar="ADDR[,ADDR]",
                   help="answer only these peers (addresses or networks, e.g. HAProxy's 10.0.0.2,10.0.1.0/24; "
                        "repeatable), on every listener: any other is closed at once, unanswered. Loopback is allowed only if listed. "
                        "Default: every peer that reaches --listen")
    a.add_argument("--probe-listen", metavar="HOST:PORT",
                   help="also answer a kubelet's or Docker's HTTP probes (GET /livez, /readyz, /startupz: 200 "
                        "pass, 503 fail) from the same verdicts, as `check_vllm --probe` would (docs/probes.md), "
                        "and Prometheus' GET /metrics")
    a.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="also serve the verdicts to Prometheus (GET /metrics, the text format; needs "
                        "prometheus-client) on this address, to the --allow peers (docs/haproxy-agent.md)")
    a.add_argument("--interval", type=number(float, 0.5), default=DEFAULT_INTERVAL, metavar="S",
                   help="seconds between two readings of /metrics; about HAProxy's agent-inter (default: %(default)g)")
    option_table.add(a, AGENT, option_table.READING)
    option_table.add(p.add_argument_group("decision (the check's)"), AGENT, option_table.DECISION)
    option_table.add(p.add_argument_group(option_table.PROCESS_TITLE), AGENT, option_table.PROCESS)
    option_table.add(p.add_argument_group(option_table.IDLE_COMPLETION), AGENT, option_table.IDLE_COMPLETION)
    p.add_argument("-V", "--version", action="version", version=f"{PROG} {__version__}")
    return p


def say(message: str) -> None:
    try:
        sys.stderr.write(f"{PROG}: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _fail(code: int, message: str) -> NoReturn:
    say(message)
    sys.exit(code)


def http_listener(where: tuple[str, int], text: str, seen: Callable[[], Seen] | None, allow: list[Network],
                  page: Page | None) -> ProbeServer:
    """--probe-listen's server (the probes, and /metrics when it can), or --metrics-listen's (/metrics only)."""
    from check_vllm.probes.httpget import ProbeServer

    try:
        return ProbeServer(where, seen, allow, page, "" if page else exposition.MISSING)
    except OSError as err:
        _fail(1, f"cannot listen on {text}: {err.strerror or err}")


def main(argv: list[str] | None = None) -> NoReturn:
    from check_vllm.cli.connection import Rotating
    from check_vllm.cli.peers import parse_allow

    from .listen import AgentServer, parse_listen
    from .watch import Watch

    try:
        args = parser().parse_args(argv)
        check_url(args.url)
        address = parse_listen(args.listen, int(DEFAULT_LISTEN.rsplit(":", 1)[1]))
        rotating = Rotating(args, AGENT)
        allow = [net for text in args.allow or () for net in parse_allow(text)]
        probe_address = host_port(args.probe_listen, AGENT_PORT, "--probe-listen") if args.probe_listen else None
        metrics_address = host_port(args.metrics_listen, 0, "--metrics-listen") if args.metrics_listen else None
        if metrics_address is not None and not exposition.available():
            raise UsageError(f"--metrics-listen: {exposition.MISSING}")
    except (UsageError, ValueError) as err:
        _fail(2, f"usage: {err} (see --help)")
    settings = option_table.settings_from(args, AGENT, min_gap=min(SETTINGS.min_gap, 0.5 * args.interval))
    observation = option_table.options_from(args, AGENT, reread=False)
    watch = Watch(rotating.endpoint, settings, observation, args.interval, args.idle_completion_every, say=say,
                  fresh=rotating.fresh)
    try:
        server = AgentServer(address, lambda: watch.answer().line(), allow)
    except OSError as err:
        _fail(1, f"cannot listen on {args.listen}: {err.strerror or err}")
    servers: list[Any] = [server]
    page = (lambda: exposition.render(watch.scrape())) if exposition.available() else None
    for where, text, seen in ((probe_address, args.probe_listen, lambda: watch.answer().seen),
                              (metrics_address, args.metrics_listen, None)):
        if where is not None:
            servers.append(http_listener(where, text, seen, allow, page))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # the listeners serve from the first second and SIGTERM is heard whatever a reading does: the first
    # verdict is the judging thread's, and the first connections wait a moment for it (Watch.answer)
    threading.Thread(target=watch.run, args=(stop,), name="judge", daemon=True).start()
    for each in servers:
        threading.Thread(target=each.serve_forever, kwargs={"poll_interval": 0.5}, name="listen", daemon=True).start()
    peers = ", ".join(map(str, allow)) if allow else "any peer that reaches it (no --allow)"
    say(f"listening on {args.listen} for {rotating.endpoint.shown}, a reading every {args.interval:g} s; answering {peers}")
    while not stop.wait(3600):
        pass
    for each in servers:
        each.shutdown()
        each.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
