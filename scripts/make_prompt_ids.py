"""Write the chat-templated prompt token ids of a recorded trace's prompts (package data).

The recorded trace keeps each response's token ids and the prompt's length, not the prompt's
ids; prompt lookup (vLLM ``ngram``) and the per-request suffix tree also match the prompt. This
script applies the model's own chat template (``add_generation_prompt=True``, as vLLM's chat
endpoint did when recording) with ``transformers`` and checks each prompt's length against the
trace's ``prompt_tokens``. Run it with a Python that has ``transformers`` (the vLLM venv)::

    .venv-vllm/bin/python scripts/make_prompt_ids.py --model .cache/smollm2-135m-instruct \
        --out src/tailsieve/workload/data/smollm2-135m-math.prompt-ids.jsonl
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src" / "tailsieve" / "workload" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder with the tokenizer")
    ap.add_argument("--trace", default=str(DATA / "smollm2-135m-math.jsonl.gz"))
    ap.add_argument("--prompts", default=str(DATA / "math-word-problems.jsonl"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    lengths: dict[str, int] = {}
    with gzip.open(args.trace, "rt") as fh:
        for line in fh:
            row = json.loads(line)
            lengths[row["prompt_id"]] = int(row["prompt_tokens"])
    out: dict[str, list[int]] = {}
    with open(args.prompts) as fh:
        for line in fh:
            p = json.loads(line)
            if p["prompt_id"] not in lengths:
                continue
            ids = tok.apply_chat_template(p["messages"], add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
            if len(ids) != lengths[p["prompt_id"]]:
                raise SystemExit(f"{p['prompt_id']}: {len(ids)} ids, the trace says "
                                 f"{lengths[p['prompt_id']]}")
            out[p["prompt_id"]] = [int(t) for t in ids]
    missing = sorted(set(lengths) - set(out))
    if missing:
        raise SystemExit(f"prompts missing from {args.prompts}: {missing[:5]}")
    Path(args.out).write_text("".join(
        json.dumps({"prompt_id": k, "prompt_token_ids": v}, separators=(",", ":")) + "\n"
        for k, v in out.items()))
    print(f"wrote {len(out)} prompts to {args.out}")


if __name__ == "__main__":
    main()
