"""*pure* What a post-mortem says of itself: the README.txt beside its files (what each is, how the collection
went, how to attach it to an upstream issue) and the one-line summary `--post-mortems` lists. The bundle is
read by someone who was not there: an operator the morning after, or an engine's maintainer."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from check_vllm.contract.safe_text import clean
from check_vllm.postmortem.refusal import MARK

#: Each file (by its name, PID for a process id) and what it holds.
FILES = (
    ("evidence.json", "why check_vllm called the server hung: the verdict, the two readings that proved it, the "
                      "verdict history of its state file, the check's own status line"),
    ("metrics.txt", "the server's last /metrics page, read once just before the restart (cut if huge)"),
    ("tree.txt", "the server's processes (the API server and every descendant) with their states and ages"),
    ("versions.txt", "the engine's version as the server says it (/version, /props) and its libraries' from their "
                     "package metadata, the kernel's, check_vllm's (no server's binary is ever run to ask)"),
    ("proc-PID.txt", "what the kernel says of process PID: command line (secrets masked), /proc status, each "
                     "thread's state (R running, S sleeping, D uninterruptible, T stopped), wchan and kernel stack"),
    ("py-spy-PID.txt", "py-spy dump --nonblocking: each Python thread's stack, innermost frame first"),
    ("py-spy-native-PID.txt", "py-spy dump --native: the same with the C/C++ frames (a process still running only)"),
    ("gdb-PID.txt", "gdb's `thread apply all bt`: each native thread's stack"),
    ("nvidia-smi.txt", "nvidia-smi -q: the GPUs, their memory, utilisation and errors"),
    ("VLLM_STACK_DUMP_for_*", "vLLM's own all-thread stack dump, from its --watchdog-config dump_dir (vLLM 0.33+): "
                              "one at each stall and one at EngineCore's SIGTERM, the newest last"),
    ("sglang-log-PID.txt", "the tail of SGLang's log (process PID's stderr) from its watchdog's py-spy dump on"),
    ("collection.json", "each step of this collection and how it ended (ok, failed, timed out, not installed)"),
)

ISSUES = (
    ("vLLM", "https://github.com/vllm-project/vllm/issues/new/choose"),
    ("llama.cpp", "https://github.com/ggml-org/llama.cpp/issues/new/choose"),
    ("SGLang", "https://github.com/sgl-project/sglang/issues/new/choose"),
)


def what(name: str) -> str:
    """What a bundle file holds, by its name."""
    for pattern, words in FILES:
        m = re.fullmatch(re.escape(pattern).replace("PID", r"(\d+)").replace(r"\*", ".*"), name)
        if m:
            return words.replace("PID", m.group(1)) if m.groups() else words
    return ""


def _verdict(evidence: Mapping[str, object]) -> str:
    for key in ("verdict", "word", "status"):
        value = evidence.get(key)
        if isinstance(value, str) and value:
            return clean(value, 80)
        if isinstance(value, Mapping) and isinstance(value.get("word"), str):
            return clean(str(value["word"]), 80)
    return "?"


def summary(evidence: Mapping[str, object], steps: Sequence[tuple[str, str]], took: float) -> str:
    """One line: the verdict, then how many steps went well and which did not."""
    bad = [f"{step}: {outcome.split(' (')[0]}" for step, outcome in steps if not outcome.startswith("ok")]
    good = len(steps) - len(bad)
    tail = "; ".join(bad)
    return clean(f"{_verdict(evidence)}; {good}/{len(steps)} steps ok in {took:.1f} s" + (f"; {tail}" if tail
                                                                                                else ""), 400)


def _refusals(steps: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """The steps with each refused dump's explanation taken out, and the explanations, each once: a server of
    eight processes refused alike would say the same long sentence sixteen times."""
    shown, reasons = [], []
    for step, outcome in steps:
        said, mark, why = outcome.partition(f"; {MARK}")
        if mark:
            reasons += [] if MARK + why in reasons else [MARK + why]
            outcome = f"{said}; {MARK} (why: below)"
        shown.append((step, outcome))
    return shown, reasons


def text(name: str, when: str, host: str, files: Sequence[tuple[str, int, bool]],
         steps: Sequence[tuple[str, str]], took: float, budget: float) -> str:
    """README.txt: what this is, each file, the steps, and how to share it."""
    out = [f"check_vllm post-mortem {name}", "",
           f"Taken {when} on {host} by check_vllm_restart, just before it restarted a server it had proved hung, "
           "so that the moment of the hang outlives the restart.", "", "Files:"]
    width = max([len(f) for f, _, _ in files] + [len("README.txt")])
    for file, size, cut in files:
        out.append(f"  {file:<{width}}  {what(file)} [{size} bytes{', cut by the size cap' if cut else ''}]")
    out.append(f"  {'README.txt':<{width}}  this file")
    out += ["", f"Steps (budget {budget:.0f} s, took {took:.1f} s; a step out of time says so, and the rest went on):"]
    shown, reasons = _refusals(steps)
    out += [f"  {step}: {outcome}" for step, outcome in shown]
    if reasons:
        out += ["", "Why the kernel refused the dumps marked so above, and what allows them:"]
        out += [f"  {reason}" for reason in reasons]
    out += ["", "Reading it: start with evidence.json (what was seen), then the stacks of the engine's process",
            "(vLLM: VLLM::EngineCore; SGLang: its scheduler; llama.cpp: llama-server's main thread): the frame a",
            "thread sits in, and its kernel side in proc-PID.txt (a D state, a wchan in a driver), say where it hung.",
            "", "Attaching it to an upstream issue:",
            "  1. Read it first. Every file is masked of the values of secret options and variables (API keys,",
            "     tokens, passwords) and of URL user:password, but model names, paths, host names and /metrics",
            "     labels remain: remove what you may not share.",
            f"  2. tar czf {name}.tar.gz {name}   (from the directory that holds it)",
            "  3. Open a bug report, paste versions.txt and the hung process's stack into it, attach the archive:"]
    out += [f"       {engine}: {url}" for engine, url in ISSUES]
    return "\n".join(out) + "\n"
