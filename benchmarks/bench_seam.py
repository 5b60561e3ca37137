"""The cost of one seam on a real vLLM server: round trip plus one scheduling iteration.

Per repeat, one request at a time, greedy: a one-go request of ``K + 1`` tokens (its wall time
per token is one decode iteration at batch 1, round trip amortized), a piece of ``K`` tokens,
then the continuation's next token (prompt ids + the piece's ids, ``max_tokens`` 1) on the same
server (prefix cached) and on the other server (prefix prefilled). The seam overhead is the
median (same-server continuation token - one-go time per token): what a seam adds beyond that
token in one go (round trip, admission, one scheduling iteration); the move overhead adds the
prefill of the uncached prefix. Each continued token is checked to be the one-go token.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_seam.py \
        --urls http://127.0.0.1:8101,http://127.0.0.1:8102 --out benchmarks/results/seam_vllm_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from outdir import default_out


def post(url: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return out["choices"][0], time.perf_counter() - t0


def served_name(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        return str(json.loads(r.read())["data"][0]["id"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--urls", default="http://127.0.0.1:8101,http://127.0.0.1:8102")
    ap.add_argument("--tokens", type=int, default=32, help="K: tokens per piece")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", type=Path, default=default_out("seam_vllm_cpu.json"),
                    help="result JSON (default: under the system temp dir)")
    args = ap.parse_args(argv)
    a, b = args.urls.split(",")[:2]
    name = served_name(a)
    k = args.tokens
    base = {"model": name, "temperature": 0, "return_token_ids": True, "ignore_eos": True}
    rows: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        prompt = f"Run {rep}: the quick brown fox jumps over the lazy dog"
        one, t_one = post(a, {**base, "prompt": prompt, "max_tokens": k + 1})
        first, _ = post(a, {**base, "prompt": prompt, "max_tokens": k})
        prefix = list(first["prompt_token_ids"]) + list(first["token_ids"])
        same, t_same = post(a, {**base, "prompt": prefix, "max_tokens": 1})
        moved, t_moved = post(b, {**base, "prompt": prefix, "max_tokens": 1})
        want = one["token_ids"]
        assert first["token_ids"] + same["token_ids"] == want, "same-server chain differs"
        assert first["token_ids"] + moved["token_ids"] == want, "moved chain differs"
        rows.append(
            {
                "prefix_tokens": len(prefix),
                "s_per_token": t_one / (k + 1),
                "seam_token_s": t_same,
                "moved_token_s": t_moved,
                "seam_s": t_same - t_one / (k + 1),
                "move_s": t_moved - t_one / (k + 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "benchmark": "seam_overhead",
        "urls": [a, b],
        "model": name,
        "tokens_per_piece": k,
        "rows": rows,
        "median_seam_s": statistics.median(r["seam_s"] for r in rows),
        "median_move_s": statistics.median(r["move_s"] for r in rows),
        "median_s_per_token": statistics.median(r["s_per_token"] for r in rows),
        "median_seam_token_s": statistics.median(r["seam_token_s"] for r in rows),
        "median_moved_token_s": statistics.median(r["moved_token_s"] for r in rows),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
