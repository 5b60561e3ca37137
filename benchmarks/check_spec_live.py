"""Live check of speculation on a running vLLM server: its own counters against exact-match replay
of the responses it returned.

Start a server with a speculative config, e.g. (SmolLM2 on the vLLM CPU build)::

    TAILSIEVE_VLLM_MODEL=.cache/smollm2-135m-instruct TAILSIEVE_VLLM_NAME=smollm2 \\
    TAILSIEVE_VLLM_MAX_LEN=2048 TAILSIEVE_VLLM_PORT=8601 \\
    TAILSIEVE_VLLM_EXTRA='--speculative-config {"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":4}' \\
        bash scripts/start_vllm_servers.sh 1
    python benchmarks/check_spec_live.py --url http://127.0.0.1:8601 --temperature 0 \\
        --out benchmarks/results/acceptance/live_ngram_cpu_t0.json

It sends ``--prompts`` of the shipped math prompts ``--samples`` times each at once (chat API,
token ids returned), reads the server's ``vllm:spec_decode_*`` counters before and after, and
replays each returned response against ``tailsieve.drafts``' n-gram matcher with the same window
and depth. With a lossless engine and one-hot drafts, greedy decoding must give identical
counts; at temperature > 0 the engine's accepted share estimates the same quantity as the replay.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tailsieve.drafts import DraftConfig, Group, NgramConfig
from tailsieve.drafts.ngram import NgramSource
from tailsieve.drafts.replay import ReplayStats
from tailsieve.workload.shipped import DATA_DIR


def counters(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num") and "_total" in line:
            name = line.split("{")[0]
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="smollm2", help="served model name")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--num-speculative-tokens", type=int, default=4)
    ap.add_argument("--prompt-lookup-min", type=int, default=1)
    ap.add_argument("--prompt-lookup-max", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    lines = (DATA_DIR / "math-word-problems.jsonl").read_text().splitlines()[:args.prompts]
    prompts = [json.loads(line) for line in lines]

    def one(p: dict[str, Any]) -> tuple[str, list[int], list[int]]:
        body = {"model": args.model, "messages": p["messages"], "max_tokens": args.max_tokens,
                "temperature": args.temperature, "return_token_ids": True}
        req = urllib.request.Request(args.url + "/v1/chat/completions",
                                     json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        r = json.loads(urllib.request.urlopen(req, timeout=3600).read())
        return p["prompt_id"], r["prompt_token_ids"], r["choices"][0]["token_ids"]

    before, t0 = counters(args.url), time.perf_counter()
    with ThreadPoolExecutor(args.prompts * args.samples) as pool:
        rows = list(pool.map(one, [p for p in prompts for _ in range(args.samples)]))
    wall = time.perf_counter() - t0
    after = counters(args.url)
    engine = {k.removeprefix("vllm:spec_decode_"): after[k] - before.get(k, 0.0) for k in after}
    cfg = DraftConfig(max_spec_tokens=args.num_speculative_tokens,
                      ngram=NgramConfig(args.prompt_lookup_min, args.prompt_lookup_max))
    replay = ReplayStats()
    for pid, prompt_ids, tokens in rows:
        replay.add(NgramSource().replay_group(Group(pid, 0, tuple(prompt_ids), (tuple(tokens),)),
                                              1, cfg))
    tot = replay.total()
    lengths = sorted(len(t) for _, _, t in rows)
    out = {"settings": vars(args) | {"out": str(args.out)}, "wall_s": round(wall, 1),
           "engine": engine,
           "engine_accepted_per_drafted": (engine.get("num_accepted_tokens_total", 0.0)
                                           / max(engine.get("num_draft_tokens_total", 0.0), 1)),
           "replay": {"drafts": tot.steps_with_draft, "drafted_tokens": tot.drafted,
                      "accepted_tokens": tot.accepted, "accepted_per_drafted": tot.acceptance_rate,
                      "tau": tot.tau},
           "response_lengths": lengths}
    print(json.dumps(out, indent=1))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
