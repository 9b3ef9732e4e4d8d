"""What no post-mortem file may hold (issue 51), the pure tables: each engine's secret options (vLLM's and SGLang's
long ones, llama.cpp's -hft), a URL's userinfo, a variable's or a config key's value, masked wherever they show
(a py-spy header line is the whole command line), the known values gathered from a process's argv, environment
and --config file masked anywhere, any bytes; and what is no secret (--tokenizer, a number of tokens) untouched.
Against real processes and real dumpers: tests/host/test_postmortem_secrets.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from check_vllm.postmortem import mask, procs
from check_vllm.postmortem.bundle import Bundle
from check_vllm.postmortem.mask import Secrets, by_pattern, config_secrets, environ_secrets, masked, secret_option
from check_vllm.postmortem.procs import Proc
from check_vllm.restart.post_mortem import BUDGET


@pytest.mark.parametrize("option", [
    "--api-key", "--api-key=sk-1", "--admin-api-key", "--hf-token", "--hf_token=x", "-hft", "--password",
    "--auth_secret=s", "--ssl-keyfile-password", "--credentials", "--passwd",
])
def test_secret_options_of_every_engine(option):
    assert secret_option(option)


@pytest.mark.parametrize("option", [
    "--tokenizer", "--tokenizer-mode", "--max-num-batched-tokens", "--disable-log-stats", "--ssl-keyfile",
    "--skip-tokenizer-init", "-m", "--port", "-hf", "-hff", "api-key", "--keyword", "-",
])
def test_what_is_no_secret_option(option):
    assert not secret_option(option)


@pytest.mark.parametrize(("argv", "shown"), [
    # vLLM: its --api-key takes several keys; a secret-named flag before the next option hides nothing
    (["vllm", "serve", "m", "--api-key", "k1", "k2", "--port", "8000"],
     ["vllm", "serve", "m", "--api-key", "***", "***", "--port", "8000"]),
    (["vllm", "serve", "m", "--return-tokens-as-token-ids", "--port", "8000"],
     ["vllm", "serve", "m", "--return-tokens-as-token-ids", "--port", "8000"]),
    # llama.cpp: the short -hft, and --api-key
    (["llama-server", "-hft", "hf_x", "-m", "m.gguf", "--api-key", "sk-1"],
     ["llama-server", "-hft", "***", "-m", "m.gguf", "--api-key", "***"]),
    # SGLang
    (["python", "-m", "sglang.launch_server", "--admin-api-key=adm", "--api-key", "sk", "--skip-tokenizer-init"],
     ["python", "-m", "sglang.launch_server", "--admin-api-key=***", "--api-key", "***", "--skip-tokenizer-init"]),
])
def test_secret_values_are_masked_in_a_command_line(argv, shown):
    assert masked(argv) == shown


def test_procs_masks_with_this_modules_rule_alone():
    assert procs.masked is mask.masked
    p = Proc(7, 1, "llama-server", "S", 1.0, ("llama-server", "-hft", "hf_secret", "-c", "4096"), "/llama-server")
    assert procs.tree([p]).splitlines()[1].endswith("llama-server: llama-server -hft *** -c 4096")
    assert "hf_secret" not in procs.describe(p)


@pytest.mark.parametrize(("text", "shown"), [
    # py-spy's header is the whole command line, as the process has it
    (b"Process 123: /venv/bin/python -m vllm.entrypoints.openai.api_server --api-key sk-abc --port 8000\n",
     b"Process 123: /venv/bin/python -m vllm.entrypoints.openai.api_server --api-key *** --port 8000\n"),
    (b"Process 9: llama-server -hft hf_x -mu https://user:pw@host/m.gguf --api-key=sk-2 -c 4096\n",
     b"Process 9: llama-server -hft *** -mu https://***@host/m.gguf --api-key=*** -c 4096\n"),
    (b"sglang --admin-api-key adm-1 --hf_token=t\n", b"sglang --admin-api-key *** --hf_token=***\n"),
    # a URL's userinfo: a password (even with an @ in it), a lone token
    (b"git clone https://tok123@host/x.git", b"git clone https://***@host/x.git"),
    (b"upstream=\"http://u:p@ss@10.0.0.1:8000/v1\"", b"upstream=\"http://***@10.0.0.1:8000/v1\""),
    # an environment: secret-named variables only
    (b"HF_TOKEN=hf_abc\nVLLM_API_KEY=k123\nLLAMA_API_KEY=a,b\nTOKENIZERS_PARALLELISM=false\nPATH=/usr/bin\n",
     b"HF_TOKEN=***\nVLLM_API_KEY=***\nLLAMA_API_KEY=***\nTOKENIZERS_PARALLELISM=false\nPATH=/usr/bin\n"),
    # a config file, a JSON document (which stays JSON), an HTTP header
    (b"api-key: sk-1234\nport: 8000\n", b"api-key: ***\nport: 8000\n"),
    (b'{"api_key": "sk-\\"1", "max_tokens": 16, "token": 5}', b'{"api_key": "***", "max_tokens": 16, "token": "***"}'),
    (b"Authorization: Bearer abc.def\n", b"Authorization: Bearer ***\n"),
    # not secrets: a tokenizer, numbers of tokens, a gdb frame's argument, a metric, an option with no value
    (b"--tokenizer /m --max-num-batched-tokens 8192 --disable-log-stats --skip-tokenizer-init --ssl-keyfile /k",
     b"--tokenizer /m --max-num-batched-tokens 8192 --disable-log-stats --skip-tokenizer-init --ssl-keyfile /k"),
    (b"#0 llama_token_to_piece (vocab=0x1, token=42) at x.cpp:12\n", b"#0 llama_token_to_piece (vocab=0x1, token=42) at x.cpp:12\n"),
    (b"vllm:prompt_tokens_total 5\n", b"vllm:prompt_tokens_total 5\n"),
    (b"x --api-key\n--api-key --port 1\n", b"x --api-key\n--api-key --port 1\n"),
    # not UTF-8
    (b"\xff\xfe --api-key \x80\x81 ok \xc3", b"\xff\xfe --api-key *** ok \xc3"),
])
def test_secret_shapes_are_masked_whatever_the_value(text, shown):
    assert by_pattern(text) == shown


def test_a_json_file_stays_json():
    doc = json.dumps({"api_key": "sk-1", "token": 5, "nested": {"hf_token": None}, "tokens": 10})
    assert json.loads(by_pattern(doc.encode())) == {"api_key": "***", "token": "***", "nested": {"hf_token": "***"},
                                                    "tokens": 10}


@pytest.mark.parametrize(("raw", "found"), [
    (b"api-key: sk-1\nport: 8000\n", ["sk-1"]),
    (b'api_key: "sk-2"\nhf-token: \'x y\' # a comment\nmodel: m\n', ["sk-2", "x y"]),
    (b"admin-api-key: [a1234, \"b1234\"]\n", ["a1234", "b1234"]),
    (b"api-key:\n  - c1234\n  - d1234\nport: 1\n", ["c1234", "d1234"]),
    (b"tokenizer: /m\nmax-num-batched-tokens: 8192\n", []),
    (b"\xef\xbb\xbfapi-key: k\xc3\xff\n", ["k\ufffd\ufffd"]),  # a BOM, bytes that are not UTF-8
])
def test_the_secrets_of_a_config_file(raw, found):
    assert config_secrets(raw) == found


def test_the_secrets_of_an_environment():
    env = {"HF_TOKEN": "hf_1", "LLAMA_API_KEY": "k1234,k5678", "TOKENIZERS_PARALLELISM": "false",
           "HF_ENDPOINT": "https://u:pw1234@x", "PATH": "/bin"}
    assert environ_secrets(env) == ["hf_1", "k1234,k5678", "k1234", "k5678", "u:pw1234", "pw1234"]


def test_known_values_are_masked_anywhere_longest_first_never_a_short_or_common_one():
    secrets = Secrets(["abcd", "abcdef", "1", "true", "  ", 'q"uote'])
    assert secrets.values == ('q\\"uote', "abcdef", 'q"uote', "abcd")  # as JSON would hold it, too
    assert secrets.scrub(b'abcdefg abcd 1 true q"uote "q\\"uote" \xff') == b'***g *** 1 true *** "***" \xff'


def test_a_process_family_gives_its_argv_secrets_and_the_known_ones(tmp_path: Path):
    gone = Proc(2 ** 22 + 7, 1, "python3", "S", 1.0, ("python", "-m", "vllm.entrypoints.openai.api_server",
                "--api-key", "sk-argv", "-mu", "https://u:pw-url@h/m.gguf", "--config", "gone.yaml"), "")
    secrets = Secrets.of([gone], known=["sk-check"])
    assert set(secrets.values) == {"sk-argv", "u:pw-url", "pw-url", "sk-check"}
    header = b"Process 1: python -m x sk-argv https://h/?pw-url sk-check\n"  # not beside its option: still masked
    assert secrets.scrub(header) == b"Process 1: python -m x *** https://h/?*** ***\n"


def test_a_bundle_masks_every_file_before_its_size_cap(tmp_path: Path):
    bundle = Bundle(tmp_path / "b", tmp_path, 1 << 20)
    os.mkdir(bundle.path, 0o700)
    bundle.write("plain.txt", "--api-key sk-1 as given")
    bundle.mask = Secrets(["sk-known-value"]).scrub
    bundle.write("tree.txt", "vllm serve --api-key sk-1 sk-known-value")
    bundle.write_json("evidence.json", {"api_key": "x", "seen": "sk-known-value"})
    assert (bundle.path / "plain.txt").read_text() == "--api-key sk-1 as given"
    assert (bundle.path / "tree.txt").read_text() == "vllm serve --api-key *** ***"
    assert json.loads((bundle.path / "evidence.json").read_text()) == {"api_key": "***", "seen": "***"}
    assert bundle.files[1] == ("tree.txt", len("vllm serve --api-key *** ***"), False)


@pytest.mark.parametrize("data", [b"--a" * (1 << 16), b".--a" * (1 << 16), b"http://" + b"a" * (1 << 18),
                                  b"a" * (1 << 18), b"a.b:" * (1 << 16), b'x: "\\"' * (1 << 15), b"-" * (1 << 18)],
                         ids=["options", "dotted-options", "url", "letters", "names", "escaped-quotes", "dashes"])
def test_a_dump_of_any_shape_is_masked_in_linear_time(data):
    """The masking runs inside the collection's budget: 256 KiB of the worst shapes for a backtracking pattern
    (a run a pattern may start anywhere in) take milliseconds, where a quadratic scan takes tens of seconds."""
    started = time.monotonic()
    Secrets(["sk-known"]).scrub(data)
    # the bound is the product's own figure: the whole collection's default --post-mortem-budget (BUDGET, 20 s),
    # which the masking must fit in; a linear scan takes ~0.01 s here (2000x under it), a backtracking one over 60 s
    assert time.monotonic() - started < BUDGET
