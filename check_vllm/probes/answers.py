"""A run of the check -> an orchestrator's probe (a Kubernetes exec probe, a Docker HEALTHCHECK): pass or fail,
and why, in one line. Pure.

A probe's exit is an order, not a severity: a failed liveness probe restarts the container, a failed readiness
probe takes the pod out of its Service, a startup probe holds the other two back while the model loads. So:

- liveness fails only where check_vllm_restart would restart: a restartable word (vocab.RESTARTABLE) at
  CRITICAL, i.e. with its proof. A first sign, a start, a stop, sleep, and every fault of the monitoring side
  pass, and the line says in spite of what: a probe's own fault must never restart the server. Under a fleet
  restart budget a failing liveness asks the fleet first and passes over it (budgeted; the question is the
  handler's, asked by check_vllm.restart.fleet_probe).
- readiness fails from the first sign: whatever the rotation table (check_vllm.contract.rotation) drains,
  fails or marks down. What it abstains on, and every fault of ours, passes: capacity is never taken out on
  the monitor's own fault.
- startup passes once the server has served: a /metrics reading this run, or a verdict that it serves, or its
  own model list naming the model where /metrics cannot be read (llama.cpp without --metrics, SGLang without
  --enable-metrics, a key the page refuses: for ever `no metrics`, which must not fail startup for ever; a
  --proxy job, which never reads it). When the check itself faulted it cannot tell, and neither answer is safe
  (fail may restart a loaded server once its failureThreshold is spent, pass hands a loading one to liveness
  early); it passes only when the state file says the server served before, else fails. Liveness then passes
  on a loading server anyway (starting is not proof), so an early hand-over costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract import rotation, vocab
from check_vllm.contract.safe_text import clean
from check_vllm.contract.vocab import CODE_NAMES, CRITICAL, OK, RESTARTABLE, UNKNOWN

LIVENESS, READINESS, STARTUP = "liveness", "readiness", "startup"
#: The words whose verdict may rest on the server's model list alone (Seen.loaded): /metrics off or refused, a
#: --proxy job's, which never reads it.
LISTS_ITS_MODEL = (vocab.NO_METRICS, vocab.PROXY)
#: The probe kinds, in the order the kubelet runs them in a pod's life (startup gates the other two).
KINDS = (STARTUP, READINESS, LIVENESS)
#: The option, as the command line and the pre-scan (kind_in) both spell it.
OPTION = "--probe"
#: The option naming a running check_vllm_agent --probe-listen to ask first (check_vllm.probes.ask).
AGENT_OPTION = "--agent"
#: The option letting a probe pass on a passing verdict another run saved moments ago (nagios.probe.answer_saved).
REUSE_OPTION = "--reuse-verdict"
#: Its bound, seconds: a freeze is found by the first reading after the saved verdict is this old, so it delays a
#: proof by at most this much; a probe period is usually 10 s.
REUSE_MAX = 30.0
#: The port of the agent's HTTP probes (--probe-listen, --agent) when only a host is given.
AGENT_PORT = 8081
#: The label of the line when --probe came with a kind we do not know (argparse will refuse it).
NO_KIND = "probe"
#: The exit codes of a probe: what the kubelet and Docker read.
PASS, FAIL = 0, 1
#: One line the kubelet keeps in the pod's events (it truncates long probe output anyway).
LINE_CAP = 300
#: A fault beside a verdict is quoted this far, so that the verdict still fits on the line.
FAULT_CAP = 120
#: The proof a fleet budget's word follows is cut to fit the line, never below this.
PROOF_MIN = 40


class Seen(NamedTuple):
    """What one run of the check gave the probe."""

    #: The verdict's word; "" when the run ended without one (a fault of ours: bad options, a time-out, a bug).
    word: str = ""
    code: int = UNKNOWN
    #: The verdict's status text ("busy: 2 running, ...").
    summary: str = ""
    #: A fault of the monitoring side, beside the verdict or instead of one ("state not saved: ...").
    fault: str = ""
    #: The server was read this run: /metrics answered and its engines were judged.
    reading: bool = False
    #: The state file kept a reading from an earlier run: the server served before.
    served_before: bool = False
    #: The server answered its own readiness this run without a reading (its model list; Verdict.loaded).
    loaded: bool = False


class Answer(NamedTuple):
    """A probe's answer: its exit, and the line that says why."""

    kind: str
    passed: bool
    why: str
    #: Passed although something was wrong (a first sign, a fault of ours): the line says so.
    in_spite: bool = False

    @property
    def code(self) -> int:
        return PASS if self.passed else FAIL

    def line(self) -> str:
        how = "pass in spite of" if self.passed and self.in_spite else "pass" if self.passed else "fail"
        return clean(f"{self.kind} {how}: {self.why or 'no reason given'}", LINE_CAP)


def said(seen: Seen) -> str:
    """What the run said, its state named unless OK: 'WARNING stalling: ...', 'UNKNOWN <fault>; CRITICAL down: ...'."""
    verdict = ""
    if seen.word:
        verdict = seen.summary or seen.word
        verdict = verdict if seen.code == OK else f"{CODE_NAMES[seen.code]} {verdict}"
    fault = f"{CODE_NAMES[UNKNOWN]} {clean(seen.fault, FAULT_CAP)}" if seen.fault else ""
    return "; ".join(filter(None, (fault, verdict)))


def _ours(seen: Seen) -> bool:
    """A fault of the monitoring side: no verdict, a verdict of its own (UNKNOWN: DNS, TLS, protocol), or a
    fault beside the verdict (a state file it could not write judges this run alone)."""
    return bool(seen.fault) or not seen.word or seen.code == UNKNOWN


def _clean_pass(kind: str, seen: Seen) -> Answer:
    return Answer(kind, True, said(seen), in_spite=_ours(seen) or seen.code != OK)


def liveness(seen: Seen) -> Answer:
    if not _ours(seen) and seen.word in RESTARTABLE and seen.code == CRITICAL:
        return Answer(LIVENESS, False, said(seen))
    return _clean_pass(LIVENESS, seen)


def restarts(reply: Answer) -> bool:
    """The answer restarts the server: a failing liveness (the kubelet, or Docker's restarter, acts on it)."""
    return reply.kind == LIVENESS and not reply.passed


def budgeted(reply: Answer, act: bool, why: str, proof: str = "") -> Answer:
    """A failing liveness once the fleet restart budget was asked (check_vllm.restart.fleet): kept (`act`), it
    fails; held (over the budget, or the fleet not asked under --fleet-unasked hold), it passes in spite of the
    proof, and a person decides. `why` is the proof (`proof`, when it starts with it), then the budget's word: the
    proof is cut so that the budget's word still fits on the line. Any other answer is as it was."""
    if not restarts(reply):
        return reply
    held = Answer(reply.kind, not act, why, in_spite=not act)
    if proof and why.startswith(proof):
        word = why[len(proof):]
        room = LINE_CAP - len(held._replace(why=word).line())
        held = held._replace(why=clean(proof, max(room, PROOF_MIN)) + word)
    return held


def readiness(seen: Seen) -> Answer:
    if _ours(seen):
        return _clean_pass(READINESS, seen)
    entry = rotation.rotation_for(seen.word, seen.code)
    if entry in (vocab.READY, vocab.ABSTAIN):
        return Answer(READINESS, True, said(seen), in_spite=entry == vocab.ABSTAIN or seen.code != OK)
    return Answer(READINESS, False, said(seen))


def served(seen: Seen) -> bool:
    """The server served this run: it was read, or its verdict puts it in rotation."""
    return seen.reading or (not _ours(seen) and rotation.rotation_for(seen.word, seen.code) == vocab.READY)


def startup(seen: Seen) -> Answer:
    if served(seen):
        return Answer(STARTUP, True, said(seen), in_spite=_ours(seen))
    if seen.loaded and seen.word in LISTS_ITS_MODEL and not _ours(seen):  # its model list says it has loaded
        return Answer(STARTUP, True, f"{said(seen)} (it lists its model: loaded)", in_spite=True)
    if _ours(seen) and seen.served_before:
        return Answer(STARTUP, True, f"{said(seen)} (it served before)", in_spite=True)
    if _ours(seen):
        return Answer(STARTUP, False, f"{said(seen)} (no reading yet)")
    return Answer(STARTUP, False, said(seen))


#: One rule per probe kind.
RULES: Mapping[str, Callable[[Seen], Answer]] = MappingProxyType(
    {STARTUP: startup, READINESS: readiness, LIVENESS: liveness})


def answer(kind: str, seen: Seen) -> Answer:
    """The probe's answer to one run of the check."""
    return RULES[kind](seen)


def reused(kind: str, seen: Seen, age: float, within: float) -> Answer | None:
    """The answer a saved verdict `age` seconds old gives, when it may stand for a reading of this run: only a
    pass (a fail, which restarts the server or takes it out of its Service, is read afresh), never for startup
    (a verdict saved before a container restart is of the process before), and only within `within` seconds.
    So liveness and readiness every period share one reading between them."""
    if kind == STARTUP or not seen.word or not 0 <= age <= within:
        return None
    reply = answer(kind, seen)
    if not reply.passed:
        return None
    return reply._replace(why=f"{reply.why} (reused: the verdict of {age:.0f} s ago)")


def path(kind: str) -> str:
    """The agent's HTTP path for a probe kind (beside the kubelet's conventional /livez, /readyz, /startupz)."""
    return f"/{kind}"


def _given(argv: Sequence[str], option: str) -> str | None:
    """The value of `option` (`--opt V` or `--opt=V`; "" when it ends the line), read before argparse runs."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
        if arg == option:
            return argv[i + 1] if i + 1 < len(argv) else ""
    return None


def kind_in(argv: Sequence[str]) -> str | None:
    """The probe kind asked for, read before argparse runs (so that its errors are answered as a probe); None:
    no --probe, a plain check (--probe-timeout is not --probe)."""
    value = _given(argv, OPTION)
    return None if value is None else value if value in KINDS else NO_KIND


def agent_in(argv: Sequence[str]) -> str | None:
    """The agent to ask first (--agent HOST:PORT), read before argparse runs: asking it must cost no more."""
    return _given(argv, AGENT_OPTION) or None


def host_port(text: str, default_port: int, option: str) -> tuple[str, int]:
    """HOST:PORT, [V6]:PORT, :PORT or PORT -> (host, port), 127.0.0.1 when no host is given; ValueError with
    the reason, naming `option`."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port:
        port = str(default_port)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{option} {text!r}: the port must be a number from 1 to 65535")
    return host, int(port)
