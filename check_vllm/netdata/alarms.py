"""The Netdata alarms on the verdict chart (vllm.state): which verdict raises which alarm at what level, and the
health.d text that says so (contrib/netdata/health.d/vllm.conf, written by tools/update_readme.py). Pure.

The level follows the verdict's state, the contract's (check_vllm.contract.vocab.VERDICTS), never the word alone:
a verdict at CRITICAL raises its word's alarm CRITICAL, at WARNING (or UNKNOWN: a Netdata alarm has none)
WARNING unless the word is quiet at it (QUIET, with why), at OK nothing. The chart carries the state for this:
the current word's dimension is charts.state_value(its state), the others 0, so each template tests its own
dimension for the values of its levels ($this == 3 is CRITICAL). `unresponsive` once raised only a WARNING,
CRITICAL or not: its alarm read the word, and the word's dimension was 1 at both states.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from check_vllm.contract.vocab import BY_WORD, CRITICAL, UNKNOWN, VERDICTS, WARNING

from .charts import state_value, word_id

#: A template's levels, as health.d spells its lines; NONE: no alarm.
WARN, CRIT, NONE = "warn", "crit", ""

#: Words whose WARNING (or UNKNOWN) raises no alarm, and why: charted, never an alarm. A word's CRITICAL always
#: raises its alarm. A word added to the contract with a WARNING or UNKNOWN state is alarmed there unless placed here.
QUIET: Mapping[str, str] = MappingProxyType({
    "idle": "a WARNING idle is a rejected probe: the server answers",
    "no metrics": "the server answers /v1/models: metrics off or a key the page refuses, a configuration matter",
    "proxy": "a proxy job's WARNING is a 4xx or a redirect loop, a configuration matter",
    "starting": "a restart's normal course (bounded by --start-grace, then down, which alarms)",
    "stopping": "a restart's normal course too (bounded by --stop-grace, then down, which alarms)",
    "paused": "paused on purpose by its trainer (a weight update, a checkpoint)",
    "protocol": "the URL points at something that is not HTTP: a configuration matter",
})


class Alarm(NamedTuple):
    """One template on vllm.state: its word's dimension over a window, and what it tells the operator."""

    word: str
    #: The lookup's method and window ("min -30s": the verdict held for the whole window).
    window: str
    every: str
    klass: str
    info: str
    #: The comment above the template in health.d.
    note: str
    delay: str = "down 1m multiplier 1.5 max 1h"

    @property
    def name(self) -> str:
        return f"vllm_{word_id(self.word)}"

    def values(self, level: str) -> tuple[int, ...]:
        """The dimension's values at which this template raises `level` (the states of its word at that level)."""
        return tuple(state_value(s) for s in BY_WORD[self.word].states if level_of(self.word, s) == level)


#: One template per word that raises an alarm at any of its states, in the contract's order.
ALARMS = (
    Alarm("stalling", "min -30s", "10s", "Latency", "vLLM has work but made no progress for 30 seconds",
          "stalling: work present and no progress for the last 30 seconds, not yet long enough to be stuck."),
    Alarm("stuck", "max -10s", "5s", "Errors", "vLLM has work but makes no progress: stuck (restart it)",
          "stuck: requests are queued or running and nothing moved for the whole stuck window (or an idle\n"
          "# server left a 1-token probe unanswered while its counters stood still)."),
    Alarm("down", "min -10s", "5s", "Errors", "vLLM is down: nothing listens, or its engine died",
          "down: connection refused (nothing listens) or an engine its API server calls dead, for 10 seconds."),
    Alarm("unresponsive", "min -30s", "10s", "Errors",
          "vLLM /metrics timed out or answered 5xx for 30 seconds (CRITICAL: for as long as stuck needs)",
          "unresponsive: /metrics times out or answers 5xx: WARNING, CRITICAL once the check has proven it\n"
          "# (as long as stuck needs), each for 30 seconds."),
    Alarm("no metrics", "min -10s", "5s", "Errors", "vLLM answers neither /metrics nor /v1/models",
          "no metrics at CRITICAL: no usable /metrics and /v1/models refused or silent, for 10 seconds."),
    Alarm("proxy", "min -10s", "5s", "Errors", "the proxy's /v1/models is refused or silent",
          "proxy at CRITICAL: a proxy = yes job whose /v1/models is refused or silent, for 10 seconds."),
    Alarm("unreachable", "min -30s", "10s", "Errors",
          "vLLM cannot be reached from here (DNS or TLS): check the resolver and certificates",
          "unreachable: DNS lookup or TLS handshake fails from this host: the monitoring side (resolver, CA,\n"
          "# certificate) is broken, not necessarily the server; a restart would not help."),
    Alarm("balancer", "max -60s", "30s", "Errors",
          "this vLLM job's URL is a load balancer: set proxy = yes and watch each backend",
          "balancer: /metrics comes from more than one server process in turn: the job's URL is a load\n"
          "# balancer. Set proxy = yes for it and add a job per backend.",
          "down 5m multiplier 1.5 max 1h"),
    Alarm("kv transfer", "min -60s", "10s", "Latency",
          "vLLM's waiting work has waited a minute on a KV transfer from its prefill instance",
          "kv transfer: every waiting request deferred on a KV transfer for the last minute (disaggregated\n"
          "# prefill/decode): this decode instance is fine, its prefill side is slow or gone. Never restarted."),
)
BY_ALARMED_WORD: Mapping[str, Alarm] = MappingProxyType({a.word: a for a in ALARMS})
#: Every template's name, in the file's order.
NAMES = tuple(a.name for a in ALARMS)


def level_of(word: str, state: int) -> str:
    """The alarm level a verdict raises: its state's, never above it; none at OK, none where its word is quiet."""
    if state == CRITICAL:
        return CRIT
    if state in (WARNING, UNKNOWN) and word not in QUIET:
        return WARN
    return NONE


def raised(dimension: str, value: int) -> tuple[str, str] | None:
    """(template, level) that vllm.state's `dimension` at `value`, held for the template's window, raises; None
    when none does. Read from the same values the shipped templates test."""
    alarm = next((a for a in ALARMS if word_id(a.word) == dimension), None)
    if alarm is None or value == 0:
        return None
    level = next((lv for lv in (CRIT, WARN) if value in alarm.values(lv)), NONE)
    return (alarm.name, level) if level else None


def _expression(values: tuple[int, ...]) -> str:
    """Each value with half a step either side: Netdata interpolates a collected value to its second boundaries,
    so a step from 2 to 3 may be stored as 2.6 on the way, which an exact `== 3` would not match."""
    return " OR ".join(f"($this > {v - 0.5:g} AND $this < {v + 0.5:g})" for v in values)


def template(alarm: Alarm) -> str:
    """One health.d template."""
    lines = [f"# {alarm.note}", f" template: {alarm.name}", "       on: vllm.state", f"    class: {alarm.klass}",
             "     type: Other", "component: vLLM", f"   lookup: {alarm.window} unaligned of {word_id(alarm.word)}",
             "    units: state", f"    every: {alarm.every}"]
    lines += [f"     {level}: {_expression(alarm.values(level))}" for level in (WARN, CRIT) if alarm.values(level)]
    lines += [f"    delay: {alarm.delay}", f"     info: {alarm.info}", "       to: sysadmin"]
    return "\n".join(lines) + "\n"


def health_conf() -> str:
    """The verdict part of health.d/vllm.conf: every template, in ALARMS' order."""
    return "\n".join(template(a) for a in ALARMS)


def alarmed_words() -> tuple[str, ...]:
    """The words a verdict of which raises an alarm at one of its states: exactly those ALARMS must cover."""
    return tuple(w.word for w in VERDICTS if any(level_of(w.word, s) for s in w.states))
