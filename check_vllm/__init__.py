"""check_vllm: tell a busy vLLM server from a stuck one without using its request slots."""

__version__ = "0.1.0"
