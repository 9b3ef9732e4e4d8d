"""Which process on this host serves a port: an engine's server found by its command line (its row's programs;
its port as its row says it is told: --port, its environment, its --config file, check_vllm.server.serverargs),
behind a proxy on this host, and what the host cannot see (/proc hidden, another network namespace, a port it
cannot tell), so that finding none is proof only when it is. Read only when /metrics gave no reading, and only
for a URL whose host is this host (check_vllm.server.host).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from check_vllm.contract.engines import ENGINES, VLLM, Engine
from check_vllm.contract.instants import Instant
from check_vllm.contract.values import ServerProcess, Witness
from check_vllm.machine import clock
from check_vllm.server import procfs, serverargs

#: vLLM's API server's module, for `python -m ...` command lines.
API_MODULE = VLLM.modules[0]


def engine_of(argv: Sequence[str]) -> Engine | None:
    """The engine whose server this command line runs (None: none of theirs)."""
    return next((row for row in ENGINES if _runs(row, argv)), None)


def is_api_server(argv: Sequence[str]) -> bool:
    """A command line of an engine's server: vLLM's, llama-server, ..."""
    return engine_of(argv) is not None


def _runs(row: Engine, argv: Sequence[str]) -> bool:
    """A command line of `row`'s server: its program, `vllm serve ...`, or `python -m` its module (or its file)."""
    if argv and os.path.basename(argv[0]) in row.programs:
        return True
    return any(os.path.basename(a) in row.serves and list(argv[i + 1:i + 2]) == ["serve"] for i, a in enumerate(argv)) \
        or any(a == m or a.endswith("/" + m.replace(".", "/") + ".py") for a in argv for m in row.modules)


def api_port(argv: Sequence[str], cwd: str = "/", owner: int | None = None,
             environ: Mapping[str, str] | None = serverargs.NO_ENVIRON) -> int | None:
    """The port an engine's server with this command line serves, told where its row says (--port, its
    environment `environ`, its --config file; check_vllm.server.serverargs.port); None when it cannot be told
    here (`environ` None: unreadable). A relative --config is the server's own (its working directory `cwd`)."""
    return serverargs.port(engine_of(argv) or VLLM, argv, cwd, owner, environ)


def serves_port(argv: Sequence[str], port: int, cwd: str = "/",
                environ: Mapping[str, str] | None = serverargs.NO_ENVIRON) -> bool:
    """A command line of an engine's server that serves `port` (api_port: told by its command line, environment
    or config file, else its row's default)."""
    return is_api_server(argv) and api_port(argv, cwd, environ=environ) == port


def _stat_start(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: the start time in clock ticks since boot (after the `(comm)` field,
    which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read(4096)
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process(pid: int, how: str, engine: str = VLLM.name) -> ServerProcess | None:
    """The live process `pid`, with its identity and age; None when it is gone (or a zombie)."""
    ticks = _stat_start(pid)
    if ticks is None or pid <= 0:
        return None
    started = ticks / os.sysconf("SC_CLK_TCK")
    now = clock.now()
    if now.mono is None:  # no boot-time clock here: /proc/uptime is the same clock
        return None
    return ServerProcess(pid, ticks, Instant(now.wall - max(now.mono - started, 0.0), started, now.boot), how, engine)


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _api_servers(user: int | None) -> tuple[dict[int, list[int]], list[str], list[str]]:
    """Every engine's server process here, by the port it serves, of `user` only when given (another user's
    processes are not ours to believe), in this network namespace; and what cannot be told of the others:
    those whose port cannot be told here, and those in another network namespace."""
    mine, untold, elsewhere = _netns("self"), [], []
    servers: dict[int, list[int]] = {}
    for pid in procfs.pids():
        argv = procfs.cmdline(pid)
        row = engine_of(argv) if pid != os.getpid() else None
        if row is None:
            continue
        owner = _owner(pid)
        if user is not None and owner != user:
            continue
        env = serverargs.environ(pid) if row.port_env else serverargs.NO_ENVIRON
        served, ns = serverargs.port(row, argv, f"/proc/{pid}/cwd", owner, env), _netns(pid)
        if served is None:
            untold.append(f"{row.name} process {pid}: its port cannot be told here")
        elif ns is None or (mine is not None and ns != mine):
            elsewhere.append(f"{row.name} process {pid}: it runs in another network namespace")
        else:
            servers.setdefault(served, []).append(pid)
    return servers, untold, elsewhere


def _oldest(pids: Sequence[int], how: str) -> ServerProcess | None:
    """The oldest live one (the parent of a multi-process server: its API server children share its command line)."""
    seen = [p for p in (process(pid, how, (engine_of(procfs.cmdline(pid)) or VLLM).name) for pid in pids)
            if p is not None]
    return min(seen, key=lambda p: p.start_ticks) if seen else None


def server_at(port: int, user: int | None = None) -> ServerProcess | None:
    """The server process here whose command line (environment, config file) serves `port`, of `user` when
    given: by_command_line's first look only (one /proc scan), for what its command line says beyond its port."""
    return _oldest(_api_servers(user)[0].get(port, []), "command line")


#: What a proxy answers while the server behind it does not: nginx 502 or 504, Caddy 502 or 503, HAProxy 503.
GATEWAY = (502, 503, 504)
#: Reverse proxies by their program's name (/proc/PID/comm): only behind one of these is the one engine server of
#: this host taken for the server behind the URL (any other program answering a 5xx may be anything).
PROXIES = frozenset({"nginx", "haproxy", "caddy", "envoy", "traefik", "httpd", "apache2", "lighttpd", "h2o",
                     "litellm", "oauth2-proxy", "varnishd", "openresty"})


def by_command_line(port: int, server_port: int | None = None, user: int | None = None,
                    status: int | None = None) -> Witness | None:
    """The vLLM API server process here whose command line (or --config file) serves `port` (or `server_port`,
    the port vLLM listens on behind a proxy that holds the URL's), of `user` when given, in this network
    namespace. When another program holds the URL's port (nginx for TLS or auth) and answered a 5xx (`status`,
    GATEWAY): with --server-user, that user's one engine server; with no option and a reverse proxy (PROXIES),
    this host's one engine server, as a guess (_the_one_here); else what holds the port and how to name the
    server. Finding none is proof of none only when the host saw all it needs (blind): otherwise a Witness that
    says what it cannot see."""
    servers, untold, elsewhere = _api_servers(user)
    found = _oldest(servers.get(server_port or port, []), "command line")
    if found is not None:
        return Witness(found)
    holder = "" if server_port else procfs.holder(port, is_api_server)
    if holder:
        held = f"port {port} is held by {holder}, not an engine's server"
        if user is not None:
            return _behind(held, servers, untold, elsewhere)
        if status not in GATEWAY:
            return None  # the program may front another host
        if holder.split(" (pid ")[0] in PROXIES:  # a reverse proxy's 5xx and no option naming the server
            return _the_one_here(held, servers, untold)
        return Witness(error=f"{held}: {NAME_IT}")
    why = blind(untold + elsewhere)
    return Witness(error=f"{why}: no proof there is none ({ADVICE})") if why else Witness()


#: How an operator names the server behind a proxy on this host.
NAME_IT = ("name the server behind it with --server-port or --server-user (or --pid-file, --pid-command) for this "
           "host to witness its start")
#: How an operator names the server's process where the host cannot tell it.
ADVICE = "name it with --server-user, --server-port, --pid-file or --pid-command"


def _behind(held: str, servers: dict[int, list[int]], untold: list[str], elsewhere: list[str]) -> Witness:
    """The URL's port is another program's (a TLS or auth proxy) and --server-user names the server's user: the
    one engine server of that user in this network namespace is the witness; it may as well be on another host,
    or in a container (then it cannot be told)."""
    if untold or (elsewhere and not servers):
        return Witness(error=f"{held}; {blind(untold + elsewhere)}: no proof there is none ({ADVICE})")
    if len(servers) > 1:
        ports = ", ".join(map(str, sorted(servers)))
        return Witness(error=f"{held}, and this user's engine servers here serve ports {ports}: name the one "
                             "behind it with --server-port")
    for served, pids in servers.items():
        found = _oldest(pids, f"command line: the one engine server of its user here, port {served}, "
                              f"behind the URL's: {held}")
        if found is not None:
            return Witness(found)
    return Witness()


def _the_one_here(held: str, servers: dict[int, list[int]], untold: list[str]) -> Witness:
    """A reverse proxy here (PROXIES) answers a 5xx (GATEWAY) and no option names the server behind it: exactly one
    engine server on this host
    (any user, this network namespace) is taken as the witness of its start, said so (tentative: believed only
    while it is young and has not served); several are listed for the operator, and no verdict rests on any."""
    if len(servers) == 1 and not untold:
        (served, pids), = servers.items()
        found = _oldest(pids, f"command line: the one engine server on this host, port {served}, behind the URL's: "
                              f"{held}; name it with --server-port to be sure")
        if found is not None:
            return Witness(found, tentative=True)
    if len(servers) > 1:
        listed = ", ".join(f"port {port} (pid {', '.join(map(str, sorted(pids)[:3]))})"
                           for port, pids in sorted(servers.items())[:5])
        return Witness(error=f"{held}; this host's engine servers: {listed}: name the one behind it with "
                             "--server-port")
    return Witness(error=f"{held}: {NAME_IT}")


def _hidden_proc() -> bool:
    """/proc hides other users' processes from this one (mounted hidepid=1|2|invisible|noaccess, not root)."""
    if os.geteuid() == 0:
        return False
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh.read(1 << 20).splitlines()]
    except OSError:
        return False
    for fields in mounts:
        if len(fields) > 4 and fields[4] == "/proc" and "-" in fields:
            options = ",".join(fields[fields.index("-") + 3:]).split(",")
            if any(o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off") for o in options):
                return True
    return False


def blind(unsure: Sequence[str]) -> str:
    """Why finding no vLLM process for the URL's port proves nothing here ("" when it does): /proc hides other
    users' processes, or a vLLM process here has a port that cannot be told (an unreadable --config, another
    network namespace such as a container published with `-p`)."""
    if _hidden_proc():
        return "/proc hides other users' processes here (hidepid)"
    return "; ".join(unsure[:3])
