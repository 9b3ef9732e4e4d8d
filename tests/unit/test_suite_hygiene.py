"""No test decides on the wall clock unless time is what it proves (issue 53): the fast suite runs eight workers on
two shared cores, so anything timed may run 5-10x slower. Where a bound on an elapsed time is the point (a time-out
kept, a budget held), it is the product's own figure with a margin of at least 5x, and a comment beside it names
that figure: an option (`-t`, `--post-mortem-budget`) or a constant of check_vllm or the simulator (`ASK_TIMEOUT`).

Read with ast and tokenize: an `assert` whose comparison puts an elapsed time (`took`, `elapsed`, `duration`,
`waited`, `.seconds`, `time.monotonic() - ...`) below something is an upper bound; it passes only with such a
comment on its own lines or in the comment block right above it. Pure: reads files only."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The tiers of the fast suite whose tests may read a clock.
DIRS = ("unit", "e2e", "sim", "hardening", "handler", "collector")
#: A name (variable, attribute, or a subscript's string key) that holds an elapsed time: `took`, `r.seconds`,
#: `collected["took"]`, `r.perf["probe_seconds"]`; not a figure (`stuck_seconds`, DEFAULT_BUSY_QUEUE_SECONDS).
ELAPSED = re.compile(r"took|elapsed|duration|waited|seconds|probe_seconds|\w+_(took|elapsed|duration)")
#: A clock read now, with something subtracted from it or it from something: `time.monotonic() - started`.
CLOCKS = frozenset({"monotonic", "perf_counter", "time"})
#: Where a comment may name a figure: an option, or an upper-case name (a constant, perhaps module.CONSTANT).
NAMED = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)|\b([A-Z][A-Z0-9_]{2,})\b")


def product_figures() -> frozenset[str]:
    """Every option the product or the simulator parses, and every upper-case name either assigns at module level."""
    names: set[str] = set()
    for source in (*(REPO / "check_vllm").rglob("*.py"), *(REPO / "vllm_simulator").rglob("*.py")):
        text = source.read_text()
        names |= set(re.findall(r"""["'](--?[a-z][a-z0-9-]*)["']""", text))
        for node in ast.parse(text).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and re.fullmatch(r"[A-Z][A-Z0-9_]+", name.id):
                        names.add(name.id)
    return frozenset(names)


def _comments(source: str) -> dict[int, str]:
    """Line number -> its comment's text."""
    found: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = found.get(tok.start[0], "") + tok.string
    return found


def _reads_elapsed(expr: ast.expr) -> bool:
    """Does `expr` hold an elapsed time: a name for one, or a clock read now minus something?"""
    for node in ast.walk(expr):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
            node.slice.value if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
            isinstance(node.slice.value, str) else None
        if name is not None and ELAPSED.fullmatch(name):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and any(map(_clock_now, (node.left, node.right))):
            return True
    return False


def _clock_now(expr: ast.expr) -> bool:
    """`time.monotonic()`, `time.time()`, `perf_counter()`: a clock read now."""
    if not isinstance(expr, ast.Call):
        return False
    return (expr.func.attr if isinstance(expr.func, ast.Attribute) else getattr(expr.func, "id", None)) in CLOCKS


def _upper_bounds_on_elapsed(test: ast.expr) -> bool:
    """Does this assert's expression put an elapsed time below something (`took < X`, `X > took`)?"""
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            below = sides[i] if isinstance(op, (ast.Lt, ast.LtE)) else \
                sides[i + 1] if isinstance(op, (ast.Gt, ast.GtE)) else None
            if below is not None and _reads_elapsed(below):
                return True
    return False


def unjustified_bounds(source: str, figures: frozenset[str]) -> list[int]:
    """The lines of the asserts in `source` bounding an elapsed time from above with no comment naming a figure
    among `figures`, on the assert's own lines or in the comment lines right above it."""
    comments, lines = _comments(source), source.splitlines()
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert) or not _upper_bounds_on_elapsed(node.test):
            continue
        said = [comments.get(n, "") for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)]
        above = node.lineno - 1
        while above >= 1 and lines[above - 1].lstrip().startswith("#"):
            said.append(comments.get(above, ""))
            above -= 1
        named = {a or b for text in said for a, b in NAMED.findall(text)}
        if not named & figures:
            bad.append(node.lineno)
    return bad


def _sources() -> list[Path]:
    return sorted(p for d in DIRS for p in (REPO / "tests" / d).rglob("*.py"))


def test_every_upper_bound_on_an_elapsed_time_names_the_product_figure_it_checks():
    figures = product_figures()
    bad = [f"{p.relative_to(REPO)}:{line}" for p in _sources() for line in unjustified_bounds(p.read_text(), figures)]
    assert bad == [], ("an upper bound on an elapsed time with no comment naming the product's figure it checks "
                       f"(remove it, or make it that figure x5 and say so): {bad}")


def test_the_scan_sees_the_bounds_that_are_the_point():
    """Not vacuous: the -t tests are found, and pass only for their comments."""
    text = (REPO / "tests" / "hardening" / "test_timeout.py").read_text()
    assert unjustified_bounds(text, product_figures()) == []
    assert len(unjustified_bounds(text, frozenset())) >= 3


FIGURES = frozenset({"-t", "--post-mortem-budget", "ASK_TIMEOUT", "DEADLINE"})


@pytest.mark.parametrize("code", [
    "assert took < 10",
    "assert r.seconds < 4 + 1.5, r.seconds",
    "assert time.monotonic() - started < 8",
    "assert 10 > elapsed",
    "assert ok and waited <= 3",
    "assert abs(time.time() - at) < 30",
    "assert abs(at - time.time()) < 60, at",
    "assert float(r.perf['probe_seconds']) < 2",
    "assert collected['took'] < 20, collected",
    "assert took < 10  # a generous bound",
    "assert took < 10  # the run's budget",
    "# the page was held 120 s\nassert took < 10",
    "# -t 4, the budget\n\nassert took < 20",  # a blank line ends the block above
    "assert took < 10, '# -t 4 in a string is no comment'",
    "assert took < 10  # see well-known figures",
])
def test_the_detector_flags_an_unjustified_upper_bound(code):
    assert unjustified_bounds(code, FIGURES) == [code.count("\n", 0, code.index("assert")) + 1]


@pytest.mark.parametrize("code", [
    "assert took < 5 * 4  # -t 4, the run's budget, x5",
    "# the bound is the product's own figure:\n# --post-mortem-budget 4, x5\nassert took < 5 * 4",
    "assert took < 5 * ASK_TIMEOUT  # ask.ASK_TIMEOUT x5",
    "assert max(spans) < 5 * listen.DEADLINE  # listen.DEADLINE x5",
    "assert (\n    took\n    < 20  # -t 4 x5\n)",
    "assert r.seconds >= 15",  # a lower bound: a slow machine only makes it truer
    "assert 1.5 <= waited",
    "assert time.monotonic() - started >= 0.3",
    "assert t0 + 0.7 <= at.wall <= t1",  # an order between instants, no elapsed time
    "assert 0.15 * rate <= generated <= elapsed * 2 * 50.0 + 5",  # a measured time as the ceiling of a count
    "assert DEFAULT_BUSY_QUEUE_SECONDS < 60",
    "assert now - eng.moved_at >= cfg.stuck_seconds",  # a setting, not a measurement
    "assert value(after, 'process_start_time_seconds') > value(before, 'process_start_time_seconds')",
    "assert {'--stuck-seconds'} <= figures",
    "while time.monotonic() - started < 0.6:\n    pass",  # a loop's own time, no verdict
])
def test_the_detector_passes_a_justified_bound_and_what_is_no_upper_bound(code):
    assert unjustified_bounds(code, FIGURES) == []


def test_the_product_figures_are_read_from_the_product():
    figures = product_figures()
    assert {"-t", "--post-mortem-budget", "--stuck-seconds", "--probe-timeout", "ASK_TIMEOUT", "DEADLINE", "BUDGET",
            "LOCK_TIMEOUT", "DEFAULT_BUSY_QUEUE_SECONDS"} <= figures
