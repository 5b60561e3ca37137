"""Acceptance of speculative drafts per draft source on the recorded SmolLM2 trace.

Run: ``.venv/bin/python benchmarks/bench_acceptance.py --out benchmarks/results/acceptance
--package-data src/tailsieve/model/data/acceptance-smollm2-math.json`` (~10 min on one core;
``--workers 2`` halves it; ``--max-prompts 8`` for a quick look). Writes ``acceptance.json``
(everything: settings, per source and k the counts by position) and ``acceptance.md`` (the
table of docs/speculation.md) under ``--out``, and the throughput model's preset file when
``--package-data`` is given. Also replays prompt lookup with vLLM's default window (5..5) beside
the 1..4 window of the main table.

Method: exact-match replay (``tailsieve.drafts``): each recorded response is replayed verify
step by verify step; a draft's tokens are accepted while they equal the recorded ones (vLLM's
rejection sampler treats n-gram and suffix drafts as one-hot, so this is unbiased), and every
step emits the accepted tokens plus one.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from outdir import default_out

from tailsieve.drafts import DraftConfig, NgramConfig, ReplayStats, measure_acceptance, trace_groups
from tailsieve.drafts.seer_group import SeerGroupSource
from tailsieve.drafts.trace_groups import seeded_recording

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct (bf16 from the Q4_1 GGUF), vLLM 0.32 CPU"
TRACE_NOTE = ("smollm2-math: 128 math word problems x 8 samples x 2 epochs, temperature 1, "
              "max 1,024 tokens, natural EOS (src/tailsieve/workload/data/PROVENANCE.md)")


def _every_sibling(trace: str, cfg: DraftConfig, max_prompts: int | None) -> ReplayStats:
    """seer-group drafting from all seven siblings: the other recording server's included,
    which can be copies of the response (an artefact of the recording)."""
    every = ReplayStats()
    for g in trace_groups(trace, max_prompts=max_prompts):
        every.add(SeerGroupSource(independent_only=False).replay_group(g, 8, cfg))
    return every


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=default_out("acceptance"))
    ap.add_argument("--package-data", type=Path, default=None,
                    help="also write the throughput model's preset file here")
    ap.add_argument("--trace", default="smollm2-math")
    ap.add_argument("--max-spec-tokens", type=int, default=8)
    ap.add_argument("--max-prompts", type=int, default=None)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    command = "python " + " ".join(["benchmarks/bench_acceptance.py",
                                    *(sys.argv[1:] if argv is None else argv)])
    t0 = time.perf_counter()
    cfg = DraftConfig(max_spec_tokens=args.max_spec_tokens)
    prov = {"model": MODEL, "trace_description": TRACE_NOTE, "command": command,
            "python": platform.python_version()}
    seeded = seeded_recording(args.trace)  # then every sibling is independent already
    with ProcessPoolExecutor(1) as side:  # the two side runs overlap the main one
        every_job = None if seeded else side.submit(_every_sibling, args.trace, cfg,
                                                    args.max_prompts)
        table = measure_acceptance(args.trace, config=cfg, max_prompts=args.max_prompts,
                                   provenance=prov, progress=print, workers=args.workers,
                                   name="smollm2-math" if args.trace == "smollm2-math" else None)
        vllm_default = measure_acceptance(
            args.trace, config=DraftConfig(max_spec_tokens=args.max_spec_tokens,
                                           ngram=NgramConfig(5, 5)),
            sources=["ngram"], k_values=[1], max_prompts=args.max_prompts)
        every = None if every_job is None else every_job.result()
    args.out.mkdir(parents=True, exist_ok=True)
    full = table.to_dict()
    full["ngram_vllm_default_window"] = {
        "prompt_lookup_min": 5, "prompt_lookup_max": 5,
        **vllm_default.results["ngram"][1].to_dict()}
    if every is not None:
        full["seer_group_every_sibling"] = {
            "note": "corpus: all 7 siblings, including the other recording server's, which can "
                    "be copies (two unseeded servers drew the same random numbers)",
            **every.to_dict()}
    full["wall_s"] = round(time.perf_counter() - t0, 1)
    (args.out / "acceptance.json").write_text(json.dumps(full, indent=1) + "\n")
    ng = vllm_default.results["ngram"][1].total()
    md = (f"Command: `{command}`\n\nTrace: {TRACE_NOTE}. Model: {MODEL}.\n"
          f"Settings: {json.dumps(cfg.to_dict())}.\n\n" + table.to_markdown()
          + f"\nPrompt lookup with vLLM's default window (prompt_lookup_min = max = 5): "
            f"tau {ng.tau:.3f}, accepted / drafted {ng.acceptance_rate:.3f}, steps with a "
            f"draft {ng.draft_rate:.3f}.\n"
          + ("" if every is None else
             f"\nseer-group drafting from all 7 siblings (the other recording server's "
             f"included, which can be copies of the response): tau {every.total().tau:.3f}, "
             f"accepted / drafted {every.total().acceptance_rate:.3f} (not a property of the "
             f"model: see docs/speculation.md).\n"))
    (args.out / "acceptance.md").write_text(md)
    if args.package_data is not None:
        args.package_data.parent.mkdir(parents=True, exist_ok=True)
        args.package_data.write_text(json.dumps(table.to_package_dict(), indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
