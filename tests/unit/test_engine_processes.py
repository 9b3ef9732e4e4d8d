"""The host's witness knows each engine's server by its command line (its row's programs, `X serve`, modules)
and the port it serves (issue 40): a llama.cpp or SGLang server that is starting is `starting`, not down."""

from __future__ import annotations

import pytest

from check_vllm.contract.engines import LLAMA_CPP, SGLANG, VLLM
from check_vllm.server.processes import api_port, engine_of, is_api_server


@pytest.mark.parametrize(("argv", "row", "port"), [
    (["/usr/bin/vllm", "serve", "m", "--port", "8001"], VLLM, 8001),
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], VLLM, 8000),
    (["/opt/llama.cpp/build/bin/llama-server", "-m", "m.gguf", "--port", "9090"], LLAMA_CPP, 9090),
    (["llama-server", "-m", "m.gguf"], LLAMA_CPP, 8080),
    (["/venv/bin/sglang", "serve", "--model-path", "m", "--port=30001"], SGLANG, 30001),
    (["python", "-m", "sglang.launch_server", "--model-path", "m"], SGLANG, 30000),
])
def test_each_engines_server_is_known_with_its_port(argv, row, port):
    assert engine_of(argv) is row and is_api_server(argv)
    assert api_port(argv) == port


@pytest.mark.parametrize("argv", [
    ["python3", "-m", "http.server", "8000"],
    ["llama-cli", "-m", "m.gguf"],
    ["/usr/bin/sglang", "version"],
    ["vllm", "bench", "serve"],
    [],
])
def test_other_programs_are_no_engines_server(argv):
    assert engine_of(argv) is None and not is_api_server(argv)


def test_a_config_file_is_vllms_only(tmp_path):
    """vLLM's --config YAML names its port; the witness reads no other engine's config file (their default port)."""
    (tmp_path / "c.yaml").write_text("port: 8123\n")
    assert api_port(["vllm", "serve", "m", "--config", str(tmp_path / "c.yaml")]) == 8123
    assert api_port(["llama-server", "--config", str(tmp_path / "c.yaml")]) == 8080
