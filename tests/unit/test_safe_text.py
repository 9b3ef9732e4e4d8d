"""One character rule for every text a server wrote, wherever it is shown: the status line, the handler's
log, the Netdata chart labels and the collector's error.log line."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

import pytest

from check_vllm.cli import statusline
from check_vllm.contract.safe_text import clean, one_line
from check_vllm.netdata import charts, collector

HOSTILE = ["\x1b", "\u202e", "\u2028", "\u2029", "\u2066", "\x85", "\r\n", "\x00", "\x7f"]


def _netdata_log(text: str) -> str:
    err = io.StringIO()
    with redirect_stderr(err):
        collector.log(text)
    return err.getvalue()


SHOWN = {
    "safe_text.clean": lambda t: clean(t, 500),
    "statusline.fit": lambda t: statusline.fit(t, 500, "utf-8"),
    "statusline.fit (a log line)": lambda t: statusline.fit(t, 500, "utf-8", pipe=False),
    "netdata chart label": charts._q,
    "netdata error.log": lambda t: _netdata_log(t).removesuffix("\n"),
}


@pytest.mark.parametrize("where", SHOWN)
@pytest.mark.parametrize("char", HOSTILE, ids=[repr(c) for c in HOSTILE])
def test_every_place_drops_the_same_characters(where, char):
    shown = SHOWN[where](f"model{char}id")
    assert "model id" in shown, shown
    assert not any(c in shown for c in char), shown


def test_pipe_is_kept_only_where_no_perfdata_follows():
    assert one_line("a|b") == "a/b" and one_line("a|b", pipe=False) == "a|b"
    assert statusline.fit("a|b", 100, "utf-8") == "a/b"
