"""Command line -> a Run -> one verdict. Exit codes follow the plugin API: 0, 1, 2, and 3 for usage."""

from __future__ import annotations

import argparse
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from check_vllm import __version__
from check_vllm.cli import option_table, statusline
from check_vllm.cli.args import Deadline, Parser, UsageError, check_url, number
from check_vllm.cli.option_table import CHECK
from check_vllm.contract.defaults import LOCK_TIMEOUT, RUN_TIMEOUT, SETTINGS
from check_vllm.contract.vocab import CODE_NAMES, UNKNOWN
from check_vllm.nagios import probe

if TYPE_CHECKING:
    from check_vllm.probes.answers import Answer

PROG = CHECK

def _wrapped(text: str, indent: int, width: int = 104) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width - indent, break_on_hyphens=False) or [""]


def epilog() -> str:
    """The verdict and perfdata lists of --help, made from the contract's tables (check_vllm.contract.vocab)."""
    from check_vllm.contract.vocab import PERFDATA, VERDICTS

    lines = ["verdicts (first word of the status text):"]
    states = {w.word: "/".join(CODE_NAMES[c][:4] if len(w.states) > 1 else CODE_NAMES[c] for c in w.states)
              for w in VERDICTS}
    column = 2 + 14 + max(len(s) for s in states.values()) + 2
    for w in VERDICTS:
        text = _wrapped(w.meaning + ("; restartable when CRITICAL" if w.restartable else ""), column)
        lines.append(f"  {w.word:<13} {states[w.word]:<{column - 16}}{text[0]}")
        lines += [" " * column + more for more in text[1:]]
    lines += ["", "perfdata:"]
    lines += [f"  {p.label:<25} {p.what:<21} {p.source}" + (f" ({'/'.join(p.ranges)})" if p.ranges else "")
              for p in PERFDATA]
    lines += ["", "exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad usage, --help, --version, the -t timeout).",
              "The API key is read from $VLLM_API_KEY or --api-key-file, never from the command line."]
    return "\n".join(lines) + "\n"


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The check's command line; given the `argv` it will parse, without the options it cannot need there (see
    check_vllm.nagios.probe.add_options); without, whole (--help, the docs)."""
    p = Parser(prog=PROG, description="Tell a busy LLM server (vLLM, llama.cpp, SGLang) from a stuck one, without using its request slots.",
                epilog=epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    c = p.add_argument_group(option_table.SERVER)
    option_table.add(c, CHECK, option_table.SERVER)
    d = p.add_argument_group(option_table.DECISION)
    option_table.add(d, CHECK, option_table.DECISION)
    option_table.add(p.add_argument_group(option_table.PROCESS_TITLE), CHECK, option_table.PROCESS)
    option_table.add(p.add_argument_group(option_table.IDLE_COMPLETION), CHECK, option_table.IDLE_COMPLETION)
    t = p.add_argument_group("thresholds (Nagios range syntax, e.g. 20, 10:, @5:10)")
    t.add_argument("-w", "--waiting-warning", metavar="RANGE", help="waiting requests")
    t.add_argument("-c", "--waiting-critical", metavar="RANGE", help="waiting requests")
    t.add_argument("--kv-warning", metavar="RANGE", help="KV-cache usage in %% (fullest engine)")
    t.add_argument("--kv-critical", metavar="RANGE", help="KV-cache usage in %% (fullest engine)")
    g = p.add_argument_group("run")
    option_table.add(g, CHECK, option_table.STATE)
    g.add_argument("-t", "--timeout", type=number(float), default=RUN_TIMEOUT, metavar="S",
                   help="whole run, UNKNOWN beyond it (default: %(default)g)")
    g.add_argument("-v", "--verbose", action="count", default=0, help="more output (repeatable)")
    g.add_argument("-V", "--version", action="version", version=f"{PROG} {__version__}")
    probe.add_options(p, argv)  # issue 28: the probe's own block, and the fleet restart budget liveness keeps
    return p


def _validate(args: argparse.Namespace) -> None:
    """The checks of numbers alone (no httpx, no nagiosplugin: a reused verdict needs neither, see _check)."""
    if args.timeout < 2:
        raise UsageError("--timeout must be at least 2 seconds")
    # A stall is measured against a previous reading: one that --max-age already throws away can never
    # prove it, nor can a gap or a re-read that takes longer than a reading is kept.
    for option, value in (("--stuck-seconds", args.stuck_seconds), ("--min-gap", args.min_gap),
                          ("--reread-delay", args.reread_delay)):
        if not args.max_age > value:
            which = (f"{option} {value:g} must be less than --max-age {args.max_age:g}"
                     if args.max_age == SETTINGS.max_age else
                     f"--max-age {args.max_age:g} must be longer than {option} {value:g}")
            raise UsageError(f"{which}: a reading older than --max-age is no baseline")
    probe.validate(args)


def _validate_texts(args: argparse.Namespace) -> None:
    """The URL as httpx parses it, the ranges as nagiosplugin does (each imported only for this)."""
    check_url(args.url)
    from check_vllm.contract.vocab import PERFDATA

    for opt in (flag[2:].replace("-", "_") for perf in PERFDATA for flag in perf.ranges):
        spec = getattr(args, opt)
        if spec is not None:
            from nagiosplugin import Range

            try:
                Range(spec)
            except ValueError as err:
                raise UsageError(f"--{opt.replace('_', '-')}: {err}") from None


def _unknown(message: str) -> NoReturn:
    print(f"VLLM {CODE_NAMES[UNKNOWN]} - {statusline.fit(message)}")
    sys.exit(UNKNOWN)


def lean_imports() -> None:
    """httpcore imports trio (when installed) and anyio for async support this one-shot, synchronous process
    never uses: ~50 ms, a third of a whole run; httpx's own command line (httpx._main, optional in every
    release) pulls in rich and click where installed, as Debian 12's python3-httpx has them: ~70 ms more there.
    Mark them absent before the URL check imports httpx, unless already loaded."""
    for name in ("trio", "anyio", "httpx._main"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> NoReturn:
    from check_vllm.probes.answers import KINDS, agent_in, kind_in

    given = sys.argv[1:] if argv is None else argv
    kind = kind_in(given)
    if kind is None:  # a plain check never loads the probe's glue
        _check(argv)
        sys.exit(UNKNOWN)
    agent, aside, failed = agent_in(given), "", None
    if agent is not None and kind in KINDS:  # asked before anything heavy is imported: that is its whole worth
        failed, aside = probe.agent_first(kind, agent)
    from check_vllm.probes import exec_probe

    # a probe answers 0/1 and one line, whatever happens in the run (exit 2, 3, a bug)
    exec_probe.guard(kind, lambda: _check(argv, failed), exec_probe.verbose_in(given), aside)


def _check(argv: list[str] | None = None, failed: str | None = None) -> Answer:
    """The check's run; with --probe, the probe's answer is returned (check_vllm.probes.exec_probe.guard prints it).
    A plain check ends in the plugin API's exit, never returns. `failed`: the agent's liveness fail line, answered
    instead of a run of ours."""
    started = time.monotonic()
    statusline.prepare()  # LC_ALL=C or PYTHONIOENCODING=ascii: a model id in another script must not crash the output
    lean_imports()
    try:
        given = sys.argv[1:] if argv is None else argv
        args = parser(given).parse_args(given)
        _validate(args)
    except UsageError as err:
        _unknown(f"usage: {err} (see --help)")
    except SystemExit:
        sys.exit(UNKNOWN)  # --help and --version printed; the plugin API wants UNKNOWN for both

    waiting_for = ["start-up"]

    def on_alarm(signum: int, frame: Any) -> None:
        raise Deadline(f"timed out after {args.timeout:g} s waiting for {waiting_for[0]}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(args.timeout - (time.monotonic() - started), 0.1))
    try:
        from check_vllm.memory.statefile import default_dir

        state_dir = Path(args.state_dir) if args.state_dir else default_dir()
        held = None
        # before httpx is imported: a reused verdict costs a start and a file (never for the agent's fail)
        if args.probe and args.reuse_verdict and failed is None:
            from check_vllm.probes.exec_probe import answer_saved

            waiting_for[0] = "the state file lock (a verdict to reuse)"
            reply, held = answer_saved(args.probe, state_dir, args.url, args.proxy, args.reuse_verdict,
                                       min(LOCK_TIMEOUT, args.timeout / 3))
            if reply is not None:
                return reply
        _validate_texts(args)

        def doing(what: str) -> None:
            waiting_for[0] = what

        if args.probe:
            return probe.answer(args, failed, lambda: _run(args, state_dir, started, doing), held,
                                started + args.timeout, doing)
        run = _run(args, state_dir, started, doing)
        from check_vllm.contract.vocab import PERFDATA
        from check_vllm.nagios.plugin import build

        check = build(run, {flag: getattr(args, flag[2:].replace("-", "_")) for perf in PERFDATA for flag in perf.ranges})
        check.main(verbose=args.verbose, timeout=0)
    except UsageError as err:
        _unknown(f"usage: {err} (see --help)")
    except Deadline as err:
        _unknown(str(err))
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 - the plugin API has no room for a traceback on stdout
        traceback.print_exc(file=sys.stderr)
        _unknown(f"internal error: {err.__class__.__name__}: {err}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    sys.exit(UNKNOWN)


def _run(args: argparse.Namespace, state_dir: Path, started: float, doing: Any) -> Any:
    """The Run the command line decides; the API key and CA file are read here, under the run's alarm (a hung
    mount must not block for ever)."""
    from check_vllm.cli.connection import endpoint_from
    from check_vllm.session import Run

    doing("the API key and CA files" if args.api_key_file or args.ca_file else "start-up")
    endpoint = endpoint_from(args, CHECK)
    doing("start-up")
    return Run(
        endpoint=endpoint,
        settings=option_table.settings_from(args, CHECK),
        options=option_table.options_from(args, CHECK),
        state_dir=state_dir,
        # leave a second for the state file and the output, so our own verdicts beat the alarm, and a liveness
        # probe's question to the fleet restart budget its own time
        deadline=started + args.timeout - 1.0 - probe.keeps(args),
        lock_timeout=min(LOCK_TIMEOUT, args.timeout / 3),
        doing=doing,
    )


if __name__ == "__main__":
    main()
