"""The post-mortem the handler takes once it has decided to restart, before the restart destroys the hang (issue 48).

Only on the path that restarts: never for a skip, a refusal or --dry-run. The evidence is what the handler decided
on (the check's state file as it stands, the restart history, the event and the decision); the processes are the
ones the host's witness names for the URL (the check's own rule, with --pid-file, --pid-command, --server-port,
--server-user); the last /metrics page is read once with the connection rows the check takes. Whatever happens
inside, the collection returns within its budget and the restart follows (check_vllm.postmortem.collect).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from check_vllm.contract.safe_text import without_userinfo
from check_vllm.memory import statedir
from check_vllm.restart.policy import Policy, proven_hang

if TYPE_CHECKING:
    from check_vllm.contract.defaults import Options
    from check_vllm.memory.door import Door
    from check_vllm.server.fetch import Endpoint

#: The defaults of the handler's post-mortem options (check_vllm.restart.options).
BUDGET, KEEP, MAX_MB = 20.0, 20, 256
#: The directory the bundles go in, beside the handler's state (its vetted, private directory).
SUBDIR = "post-mortems"


class Plan(NamedTuple):
    """How the handler takes its post-mortems: off, or where, within what budget, how many kept in how much."""

    enabled: bool = True
    root: Path | None = None  # None: SUBDIR in the state directory the door vetted
    budget: float = BUDGET
    keep: int = KEEP
    max_bytes: int = MAX_MB << 20

    def where(self, door: Door) -> Path:
        """The root all servers' bundles go in (its byte cap is theirs together)."""
        return self.root or door.state.path.parent / SUBDIR

    def mine(self, door: Door) -> Path:
        """This server's own bundles' directory: named as its state file is (its state key), so a neighbour's
        restarts never prune, list or name this server's bundles."""
        return statedir.home(self.where(door)) / server_name(door)


def server_name(door: Door) -> str:
    return door.state.path.stem


def evidence(url: str, door: Door, event: Mapping[str, Any], why: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """What the handler decided on, as the bundle's evidence.json: the check's last verdict and the state file
    whole (the two readings compared, each streak and since when), the restart history and the decision."""
    from check_vllm.memory import codec

    memory = door.kept.memory
    last = memory.last
    return {
        "url": without_userinfo(url),
        "decision": why,
        "event": dict(event),
        "verdict": last._asdict() if last else None,
        "state_file": codec.to_json(memory),
        "restarts_before": entries,
    }


def _endpoint(reach: Callable[[], Endpoint] | None) -> Endpoint | None:
    """The connection, made once before the collection for the key it masks; a bad key or CA file is left to the
    page's step to say (its reader makes it again)."""
    try:
        return reach() if reach is not None else None
    except Exception:  # noqa: BLE001 - the page step says what is wrong with the files
        return None


def _secrets(url: str, endpoint: Endpoint | None) -> list[str]:
    """What the check was given that no bundle may hold: the API key, the URL's password."""
    from urllib.parse import urlsplit

    given = [endpoint.api_key if endpoint else None, urlsplit(url).password]
    return [s for s in given if s]


def metrics_reader(reach: Callable[[], Endpoint], timeout: float) -> Callable[[], bytes]:
    """The last /metrics page, read once: the whole page, the status line first (a 500 is evidence too). The
    connection is made only then (`reach` reads the key and CA files), inside the collection's page thread: a
    collection that never happens reads nothing, and a bad file is that step's outcome, never the restart's."""

    def read() -> bytes:
        from check_vllm.server.fetch import request

        endpoint = reach()
        with endpoint.client() as client:
            got = request(client, endpoint, "GET", "/metrics", timeout)
        return f"HTTP {got.status} ({got.content_type or 'no content type'})\n\n".encode() + got.body

    return read


def version_reader(reach: Callable[[], Endpoint], timeout: float) -> Callable[[], str]:
    """The server's own word on its version (vLLM's GET /version, else llama.cpp's /props), asked once in the
    collection's thread: never by running the server's executable (check_vllm.postmortem.versions)."""

    def read() -> str:
        from check_vllm.postmortem.versions import ROUTES, answered
        from check_vllm.server.fetch import request

        endpoint = reach()
        with endpoint.client() as client:
            for route, _ in ROUTES:
                got = request(client, endpoint, "GET", route, timeout)
                said = answered(route, got.status, got.body)
                if said:
                    return said
        return ""

    return read


def take(plan: Plan, door: Door, url: str, process: Options, reach: Callable[[], Endpoint] | None,
         evidence_of: dict[str, Any]) -> str:
    """Collect into a new bundle; the words the handler's log line carries (where it is, or why there is none)."""
    if not plan.enabled:
        return "no post-mortem (--no-post-mortem)"
    from check_vllm.postmortem.collect import collect
    from check_vllm.postmortem.identity import server

    named = server(url, process)
    endpoint = _endpoint(reach)
    made = (lambda: endpoint) if endpoint is not None else reach
    reader = metrics_reader(made, min(5.0, plan.budget / 4)) if made is not None else None
    proof = {**evidence_of, "processes" if named.pids else "no_process": named.how}
    version = version_reader(made, min(2.0, plan.budget / 8)) if made is not None else None
    done = collect(plan.where(door), named.pids, reader, proof, plan.budget, plan.keep, plan.max_bytes,
                   server=server_name(door), secrets=_secrets(url, endpoint), version_reader=version)
    if done.path is None:
        return f"no post-mortem: {dict(done.steps).get('bundle', 'not made')}"
    short = [f"{step} {outcome.split(':')[0]}" for step, outcome in done.steps if not outcome.startswith("ok")]
    return f"post-mortem in {done.path} ({done.took:.1f} s{'; ' + ', '.join(short[:4]) if short else ''})"


def list_bundles(root: Path) -> int:
    """`--post-mortems`: one line per bundle kept, oldest first (when, size, what it holds); the exit code."""
    from check_vllm.postmortem.bundle import BundleRefused
    from check_vllm.postmortem.retention import listing

    try:
        found = listing(root)
    except (BundleRefused, OSError) as err:
        print(f"cannot list {root}: {err}")
        return 1
    if not found:
        print(f"no post-mortem in {root}")
    where = statedir.home(root)  # a shared root's bundles are in this user's uid-N
    for each in found:
        print(f"{where / each.name}  {each.when}  {each.size / 1024:.0f} KiB  {each.summary}")
    return 0


def latest(root: Path, now: float | None = None) -> str:
    """The newest bundle, for --status's line ("; last post-mortem PATH, 3 h ago"), or "" when none is kept."""
    import time

    from check_vllm.postmortem.retention import bundles

    try:  # the directory as it is, never made or vetted here: --status only reads
        found = bundles(statedir.home(root)) if root.exists() else []
    except Exception:  # noqa: BLE001 - a listing's fault must not cost the restart service its line
        return ""
    if not found:
        return ""
    age = max((now or time.time()) - found[-1].stat().st_mtime, 0.0)
    ago = f"{age / 3600:.0f} h" if age >= 7200 else f"{age / 60:.0f} min" if age >= 120 else f"{age:.0f} s"
    return f"; last post-mortem {found[-1]}, {ago} ago"


def take_now(plan: Plan, door: Door, url: str, process: Options, reach: Callable[[], Endpoint] | None,
             policy: Policy) -> str:
    """--take-post-mortem (a Kubernetes preStop hook, the Docker restarter): a post-mortem now, but only of a
    proven hang, by the restart's own gate (policy.proven_hang). Any other stop (a rollout, a scale down, an
    operator's restart) collects nothing."""
    import time

    last = door.kept.memory.last
    if last is None:
        return "no post-mortem: the check has left no verdict, not a proven hang"
    refused = proven_hang(last, policy, time.time())
    if refused is not None:
        return f"no post-mortem: {refused.why}, not a proven hang"
    why = f"--take-post-mortem: verdict {last.word!r} ({last.text})"
    return take(plan, door, url, process, reach, evidence(url, door, {}, why, []))
