"""Generate a tiny random-weight Llama model + locally trained tokenizer that vLLM can load offline.

Runs inside the vLLM virtualenv (it needs torch, transformers and tokenizers), never touches a hub:

    $VLLM_VENV/bin/python tests/rig/make_tiny_model.py OUT_DIR

Model: LlamaForCausalLM, hidden 128, 2 layers, 4 heads (head size 32: vLLM's CPU attention backend only
accepts 32, 64, 80 or more), intermediate 256, max positions 2048, float32, safetensors.
Tokenizer: byte-level BPE (~1000 tokens) trained with `tokenizers` on a deterministic synthetic corpus,
special tokens <s> </s> <pad> <unk>, a simple chat template in tokenizer_config.json.
Everything is seeded, so two runs give the same files (~2 MB) in a few seconds.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

SEED = 1234
VOCAB_SIZE = 1000
BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"
SPECIAL_TOKENS = [BOS, EOS, PAD, UNK]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
MODEL_SHAPE = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=256,
    max_position_embeddings=2048,
)

_WORDS = (
    "the a an server model engine request token queue slot batch check health metrics monitor "
    "busy idle stuck waiting running restart probe counter gauge histogram prompt generation "
    "cache memory worker process signal time second minute hello world please answer quickly "
    "what is how why when where who which one two three four five six seven eight nine ten "
    "and or not but if then else for while with without of to in on at by from up down over "
    "user assistant system message reply question yes no maybe good bad fast slow small large"
).split()


def _corpus(rng: random.Random, lines: int = 4000) -> list[str]:
    out = []
    for _ in range(lines):
        n = rng.randint(4, 16)
        words = [rng.choice(_WORDS) for _ in range(n)]
        sentence = " ".join(words).capitalize() + rng.choice([".", "?", "!", ",", ":"])
        if rng.random() < 0.2:
            sentence += " " + str(rng.randint(0, 100000))
        out.append(sentence)
    # make sure every printable ASCII char and the chat-template markers are seen
    out.append("".join(chr(c) for c in range(32, 127)))
    out.extend(["<|user|>", "<|assistant|>", "<|system|>"] * 50)
    return out


def build_tokenizer(out_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(SEED)
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(rng), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    # The brief (and older transformers/vLLM) want the template inside tokenizer_config.json; newer
    # transformers may write chat_template.jinja instead. Put it in both places, identical.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    jinja = out_dir / "chat_template.jinja"
    if jinja.exists():
        jinja.write_text(CHAT_TEMPLATE)
    return fast


def build_model(out_dir: Path, tokenizer) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        hidden_act="silu",
        torch_dtype="float32",
        **MODEL_SHAPE,
    )
    assert config.hidden_size // config.num_attention_heads == 32, "CPU attention needs head size 32/64/80+"
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(str(out_dir), safe_serialization=True)
    GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=False,
    ).save_pretrained(str(out_dir))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT_DIR", file=sys.stderr)
        return 2
    out_dir = Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir)
    build_model(out_dir, tokenizer)
    files = sorted(p.name for p in out_dir.iterdir())
    if "model.safetensors" not in files:
        print(f"no model.safetensors written in {out_dir}: {files}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    print(f"tiny-llama written to {out_dir}: vocab {len(tokenizer)}, {size / 1e6:.1f} MB, files {files}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
