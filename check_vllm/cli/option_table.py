"""The operator options the front ends share, declared once: flag, type, bounds, default (from the contract),
help, and which front ends take it. The check's, the agent's and the handler's argparse groups, the Netdata job's
keys and bounds, and the Settings and Options a run is given are all made from this table, so an option the
front ends share is one row here plus its use, and no two front ends can disagree on its bounds or default.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from check_vllm.contract.defaults import CONNECT_TIMEOUT, OPTIONS, SETTINGS, Options, Settings
from check_vllm.contract.engines import AUTO, BY_KEY, ENGINES

#: The front ends, by the name an operator types (Netdata's is its job file's).
CHECK, AGENT, HANDLER, NETDATA = "check_vllm", "check_vllm_agent", "check_vllm_restart", "netdata"
#: The value kinds of a row.
INT, FLOAT, TEXT, FLAG = "int", "float", "text", "flag"
#: The URL every front end reads when none is given (the handler always wants it named: --url is required).
DEFAULT_URL = "http://127.0.0.1:8000"
#: At most one idle completion per this many seconds, where one process reads again and again (agent, Netdata).
PROBE_EVERY = 60.0

_EVERY = frozenset({CHECK, AGENT, HANDLER})
_JUDGES = frozenset({CHECK, AGENT, NETDATA})
_READERS = frozenset({CHECK, AGENT})
#: The rows of the server connection: the handler's post-mortem reads the last /metrics page with them too.
_CONNECTION = _JUDGES | {HANDLER}
#: The host's witness is every front end's: a Netdata job on the server's host tells starting from down too.
_WITNESS = _EVERY | {NETDATA}


class Option(NamedTuple):
    """One operator option. `field` names the Settings or Options field it sets ("" when none does);
    `negate`: the flag turns that field off (--no-idle-completion sets Options.probe False); `aliases`: the flags it
    had before, which deployed command lines and Netdata jobs still use (documented in its help, accepted alike)."""

    flag: str
    kind: str
    group: str
    help: str
    fronts: frozenset[str]
    default: Any = None
    low: float = 0.0
    high: float = math.inf
    metavar: str | None = None
    short: str = ""
    field: str = ""
    negate: bool = False
    #: The values a text row takes (none: any).
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        """The argparse destination, which is also the Netdata job's key (stuck_readings)."""
        return self.flag[2:].replace("-", "_")

    @property
    def alias_keys(self) -> tuple[str, ...]:
        """The Netdata keys of its aliases (probe_timeout for --idle-completion-timeout)."""
        return tuple(alias[2:].replace("-", "_") for alias in self.aliases)

    @property
    def shown_help(self) -> str:
        """Its help, naming the flags it had before."""
        return self.help + (f" (was {', '.join(self.aliases)})" if self.aliases else "")


SERVER, DECISION, IDLE_COMPLETION, PROCESS, READING, STATE = ("server", "decision", "idle completion", "server process",
                                                         "reading", "state")
#: The server-process group's title: where its defaults come from.
PROCESS_TITLE = ("server process (on the server's host; default: the engine server process whose command line, "
                 "environment or config file serves the URL's port, when the URL's host is this host)")

ROWS: tuple[Option, ...] = (
    Option("--url", TEXT, SERVER, "the server's base URL (default: %(default)s)", _EVERY | {NETDATA},
           default=DEFAULT_URL, short="-u"),
    Option("--api-key-file", TEXT, SERVER, "file holding the API key on its first line (else $VLLM_API_KEY); a "
           "leading UTF-8 BOM and surrounding white space are ignored, an empty file is an error", _CONNECTION,
           metavar="FILE"),
    Option("--ca-file", TEXT, SERVER, "CA bundle (PEM) to verify an https URL, e.g. a private CA's", _CONNECTION,
           metavar="FILE"),
    Option("--insecure", FLAG, SERVER, "do not verify the server's TLS certificate", _CONNECTION, default=False),
    Option("--proxy", FLAG, SERVER, "the URL is a load balancer: read only /v1/models (each /metrics read could "
           "hit another backend)", frozenset({CHECK, HANDLER, NETDATA}), default=False, field="proxy"),
    Option("--engine", TEXT, SERVER, "whose /metrics the URL serves: " + ", ".join(
           f"{row.key} ({row.name}, {row.prefix} families)" for row in ENGINES) + f"; {AUTO}: the page's families "
           "say; named, a page of another engine is no metrics (default: %(default)s)", _EVERY | {NETDATA},
           default=OPTIONS.engine, field="engine", choices=(AUTO, *BY_KEY)),
    Option("--stuck-readings", INT, DECISION, "comparisons without progress before stuck (default: %(default)s)",
           _JUDGES, default=SETTINGS.stuck_readings, low=1, high=1000, metavar="N", field="stuck_readings"),
    Option("--stuck-seconds", FLOAT, DECISION, "and wall-clock seconds without progress before stuck; 0: readings "
           "alone decide; less than --max-age, where given (default: %(default)g)", _JUDGES,
           default=SETTINGS.stuck_seconds, high=86400,
           metavar="S", field="stuck_seconds"),
    Option("--min-gap", FLOAT, DECISION, "runs closer than this repeat the last verdict instead of comparing; "
           "less than --max-age (default: %(default)g)", frozenset({CHECK}), default=SETTINGS.min_gap, metavar="S",
           field="min_gap"),
    Option("--reread-delay", FLOAT, DECISION, "with no previous reading and work present, read again after S "
           "seconds; less than --max-age (default: %(default)g)", frozenset({CHECK}), default=OPTIONS.reread_delay,
           metavar="S", field="reread_delay"),
    Option("--pause-grace", FLOAT, DECISION, "a server paused on purpose (an RL weight update: GET /is_paused, "
           "weights in flight) is paused, OK, for S seconds, then WARNING; never CRITICAL (default: %(default)g)",
           frozenset({CHECK}), default=SETTINGS.pause_grace, metavar="S", field="pause_grace"),
    Option("--recovery-window", FLOAT, DECISION, "vLLM's engine_recovery_timeout_sec: a stall while its "
           "fault-tolerance status holds an engine for recovery is not stuck within S seconds (default: "
           "%(default)g)", frozenset({CHECK}), default=SETTINGS.recovery_window, metavar="S",
           field="recovery_window"),
    Option("--max-age", FLOAT, DECISION, "a previous reading older than this is no baseline; must be longer than "
           "the check interval and than --stuck-seconds, --min-gap and --reread-delay (default: %(default)g)",
           frozenset({CHECK}), default=SETTINGS.max_age, metavar="S", field="max_age"),
    Option("--idle-completion-timeout", FLOAT, IDLE_COMPLETION, "seconds the 1-token completion sent when idle may "
           "take (default: %(default)g)", _JUDGES, default=OPTIONS.probe_timeout, low=0.1, high=600, metavar="S",
           field="probe_timeout", aliases=("--probe-timeout",)),
    Option("--idle-completion-every", FLOAT, IDLE_COMPLETION, "at most one idle completion per S seconds (default: "
           "%(default)g)", frozenset({AGENT, NETDATA}), default=PROBE_EVERY, low=1, high=86400, metavar="S",
           aliases=("--probe-every",)),
    Option("--no-idle-completion", FLAG, IDLE_COMPLETION, "never send a completion; idle is judged on /metrics alone",
           _READERS, default=False, field="probe", negate=True, aliases=("--no-probe",)),
    Option("--model", TEXT, IDLE_COMPLETION, "model the idle completion names (default: the model_name in /metrics, "
           "else the first of /v1/models)", _JUDGES, field="model"),
    Option("--state-dir", TEXT, STATE, "where the state file lives, the same for the check and its handler (default: "
           "$MP_STATE_PATH, $NAGIOS_PLUGIN_STATE_DIRECTORY, /var/lib/check_vllm, else the XDG state dir); in one "
           "that others may write to, each user keeps a private uid-N/", frozenset({CHECK, HANDLER}), metavar="DIR"),
    # the check's -t is its whole run; these front ends read again and again, each request within this
    Option("--timeout", FLOAT, READING, "per request to the server; longer is unresponsive (default: %(default)g)",
           frozenset({AGENT, NETDATA}), default=CONNECT_TIMEOUT, low=0.1, high=600, metavar="S",
           field="metrics_timeout"),
    Option("--pid-file", TEXT, PROCESS, "the server's pid file, where the host cannot tell (a wrapper, a "
           "container, a proxy in front, /proc mounted hidepid)", _WITNESS, metavar="FILE", field="pid_file"),
    Option("--pid-command", TEXT, PROCESS, "a command that prints the server's pid, e.g. 'supervisorctl pid vllm' "
           "or 'systemctl show -p MainPID --value vllm'", _WITNESS, metavar="CMD", field="pid_command"),
    Option("--server-port", INT, PROCESS, "the port the server listens on when the URL's port is a proxy's on this host "
           "(nginx for TLS or auth): its process is the witness", _WITNESS, low=1, high=65535, metavar="PORT",
           field="server_port"),
    Option("--server-user", TEXT, PROCESS, "the user the server runs as: only this user's processes, and their "
           "config files, are believed (any user's otherwise: another local user could then make the host unable to "
           "tell)", _WITNESS, metavar="USER", field="server_user"),
    Option("--start-grace", FLOAT, PROCESS, "a server that is not serving yet while its process is younger than S "
           "seconds (seen from another host: S seconds after check_vllm_restart restarted it) is starting "
           "(WARNING), not down (default: %(default)g)", _WITNESS, default=SETTINGS.start_grace, metavar="S",
           field="start_grace"),
    Option("--stop-grace", FLOAT, PROCESS, "a server whose process served and still lives but refuses connections "
           "is stopping (WARNING: a graceful stop, a restart) for S seconds, then down (default: %(default)g)",
           _WITNESS, default=SETTINGS.stop_grace, metavar="S", field="stop_grace"),
)

#: Each row by its flag.
BY_FLAG = {row.flag: row for row in ROWS}


def ranged(row: Option) -> Callable[[str], Any]:
    """An argparse type: a finite number of the row's kind within its bounds."""
    kind: Callable[[str], Any] = int if row.kind == INT else float

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or not row.low <= value <= row.high:
            raise argparse.ArgumentTypeError(f"must be a finite number from {bounds(row)}: {text!r}")
        return value
    return convert


def bounds(row: Option) -> str:
    return f"{row.low:g} to {row.high:g}" if math.isfinite(row.high) else f"{row.low:g} up"


def add(target: Any, front: str, group: str, required: Iterable[str] = ()) -> None:
    """The rows of `group` that `front` takes, added to `target` (a parser or one of its argument groups)."""
    must = set(required)
    for row in ROWS:
        if row.group != group or front not in row.fronts:
            continue
        names = [*([row.short] if row.short else []), row.flag, *row.aliases]
        if row.kind == FLAG:
            target.add_argument(*names, action="store_true", help=row.shown_help)
        elif row.flag in must:
            target.add_argument(*names, required=True, help=row.shown_help.replace(" (default: %(default)s)", ""),
                                metavar=row.metavar)
        else:
            target.add_argument(*names, type=None if row.kind == TEXT else ranged(row), default=row.default,
                                metavar=row.metavar, help=row.shown_help, choices=row.choices or None)


def _given(values: Any, front: str) -> dict[str, Any]:
    """The fields of Settings and Options that `front`'s rows set, from its argparse namespace or Netdata job."""
    out: dict[str, Any] = {}
    for row in ROWS:
        if row.field and front in row.fronts and hasattr(values, row.dest):
            value = getattr(values, row.dest)
            out[row.field] = not value if row.negate else value
    return out


def settings_from(values: Any, front: str, **more: Any) -> Settings:
    """The judge's Settings from `front`'s rows in `values`, then `more` (what the front end decides itself)."""
    given = {k: v for k, v in _given(values, front).items() if k in Settings._fields}
    return Settings(**{**given, **more})


def options_from(values: Any, front: str, **more: Any) -> Options:
    """The observation's Options from `front`'s rows in `values`, then `more`."""
    given = {k: v for k, v in _given(values, front).items() if k in Options._fields}
    return Options(**{**given, **more})


def job_number(row: Option, raw: str | None) -> float:
    """A Netdata job's value for a numeric row: its default when left out; ValueError with the reason."""
    if raw is None or not raw.strip():
        return float(row.default)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{row.dest} = {raw!r} is not a number") from None
    if not math.isfinite(value) or not row.low <= value <= row.high:
        raise ValueError(f"{row.dest} = {raw} is outside {row.low:g}..{row.high:g}")
    return value

