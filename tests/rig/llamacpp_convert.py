"""Run llama.cpp's own `convert_hf_to_gguf.py` on the tiny model, unmodified but for one fallback.

    python llamacpp_convert.py LLAMA_CPP_SOURCE MODEL_DIR [converter arguments...]

The converter knows a byte-level BPE tokenizer by the hash of how it splits a test text, and refuses one whose
hash is not in its table ("BPE pre-tokenizer was not recognized"): the tiny model's tokenizer is made here, so its
hash is in no table. Only that refusal is replaced, by "gpt-2" (byte-level BPE, what the tiny tokenizer is);
the source tree is not touched. Runs with the vLLM venv's python (torch, transformers, numpy).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> None:
    src, args = Path(sys.argv[1]), sys.argv[2:]
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    from conversion import base  # llama.cpp's converter package (b11434: conversion/base.py)

    known = base.TextModel.get_vocab_base_pre

    def or_gpt2(self: object, tokenizer: object) -> str:
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            return "gpt-2"

    base.TextModel.get_vocab_base_pre = or_gpt2  # type: ignore[method-assign]
    sys.argv = [str(src / "convert_hf_to_gguf.py"), *args]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
