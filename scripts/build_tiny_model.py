#!/usr/bin/env python
"""Build a tiny Qwen2-shaped causal LM with random weights, for running a real
vLLM CPU server without downloading anything.

Run with the vLLM virtualenv's python (see scripts/setup_vllm.sh):

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python scripts/build_tiny_model.py [OUT_DIR] [--force]

OUT_DIR defaults to .cache/tiny-qwen2 under the repo root. The result holds
config.json, generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json (with a chat template) and special_tokens_map.json, so
transformers' AutoTokenizer / AutoModelForCausalLM and vLLM load it offline.

Deterministic: the training text, tokenizer and weights are all seeded.
Idempotent: if OUT_DIR already holds a complete model it does nothing
(pass --force to rebuild).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / ".cache" / "tiny-qwen2"
SEED = 1234
VOCAB_SIZE = 4096  # target size of the trained BPE vocabulary (specials included)
REQUIRED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2-style ChatML template.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (  # noqa: SIM905 - a vocabulary reads better as text
    "the a an of to in and or but is are was were be been have has had do does did "
    "will would can could should may might must shall not no yes if then else when "
    "while for from with without into onto over under between about above below "
    "one two three four five six seven eight nine ten hundred thousand million "
    "number sum product difference quotient answer question problem solve prove "
    "let find compute show that which what where why how who whose whom there here "
    "equation function integer prime square root triangle circle angle area length "
    "step first second third next finally therefore hence thus so because since "
    "model token request server route group replica tail length budget time "
    "hello world user assistant system reply think reason check verify result"
).split()


def _training_text(rng: random.Random, num_lines: int = 20000) -> list[str]:
    lines = []
    for _ in range(num_lines):
        n = rng.randint(4, 24)
        parts = []
        for _ in range(n):
            r = rng.random()
            if r < 0.12:
                parts.append(str(rng.randint(0, 9999)))
            elif r < 0.18:
                parts.append(rng.choice(["+", "-", "*", "/", "=", "(", ")", ",", ".", "?", "!", ":"]))
            else:
                w = rng.choice(_WORDS)
                parts.append(w.capitalize() if rng.random() < 0.1 else w)
        lines.append(" ".join(parts))
    return lines


def _is_complete(out: Path) -> bool:
    return all((out / name).is_file() for name in REQUIRED_FILES)


def build(out: Path, force: bool = False) -> None:
    if _is_complete(out) and not force:
        print(f"build_tiny_model: {out} already holds a model; nothing to do")
        return

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)

    # --- tokenizer: byte-level BPE trained on generated text -----------------
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(rng), trainer=trainer)

    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(str(out))
    # transformers 5 writes the template to chat_template.jinja; also keep it in
    # tokenizer_config.json, where older loaders look for it.
    cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text())
    tok_cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    vocab_len = len(hf_tok)

    # --- model: Qwen2 config, random weights ----------------------------------
    # Embedding rows are padded to a multiple of 64 (as real checkpoints do).
    vocab_size = ((vocab_len + 63) // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        max_window_layers=4,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        use_sliding_window=False,
        bos_token_id=hf_tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=hf_tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=hf_tok.convert_tokens_to_ids("<|endoftext|>"),
        torch_dtype="bfloat16",
        architectures=["Qwen2ForCausalLM"],
    )
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config)
    model = model.to(torch.bfloat16)
    num_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(str(out), safe_serialization=True)

    # vLLM reads generation_config.json for defaults; keep it neutral.
    (out / "generation_config.json").write_text(
        json.dumps(
            {
                "bos_token_id": config.bos_token_id,
                "eos_token_id": config.eos_token_id,
                "pad_token_id": config.pad_token_id,
            },
            indent=2,
        )
        + "\n"
    )
    print(
        f"build_tiny_model: wrote {out} (vocab {vocab_len} -> {vocab_size} rows, "
        f"{num_params / 1e6:.2f}M params, hidden {config.hidden_size}, "
        f"{config.num_hidden_layers} layers, max_position_embeddings {config.max_position_embeddings})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="output directory")
    p.add_argument("--force", action="store_true", help="rebuild even if the directory holds a model")
    args = p.parse_args(argv)
    build(Path(args.out).resolve(), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
