"""Router overhead: the live runtime's own CPU time as a fraction of step wall time.

8 emulated replicas (subprocesses, so their CPU is not counted), steps of N = 256 groups x 8
(2,048 requests in flight), TailSieve through ``TailSieveRollout``. The router process's CPU
time (``time.process_time``) is measured around every step, and reported per request and per
generated token too (what carries over to other replica speeds).

The fraction depends on how fast the replicas are. The default runs them at the ``qwen3-4b-h100``
profile's speed (an H100-class replica serving a ~4B model, ``--time-scale 1``): steps of minutes (the old hand-drawn curve: ~145 s),
~8 min in all. ``--profile cpu --time-scale 0.25`` is the stress setting used before: replicas
~6x faster per request than that, ~41 s steps.

    .venv/bin/python benchmarks/bench_router.py --out benchmarks/results/router.json
    .venv/bin/python benchmarks/bench_router.py --profile cpu --time-scale 0.25 \
        --out benchmarks/results/router_stress.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.runtime.backends import PromptInput, SamplingParams
from tailsieve.runtime.demo import StepLengths
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.rollout import RolloutConfig, TailSieveRollout
from tailsieve.workload import load_workload


async def run(
    args: argparse.Namespace, urls: list[str], profile_path: Path
) -> list[dict[str, float]]:
    wl = load_workload("paper-math", num_prompts=8 * args.groups * (args.steps + 2), seed=0)
    lengths = StepLengths(wl, args.group_size, 0)
    cfg = RolloutConfig(
        num_groups=args.groups,
        group_size=args.group_size,
        policy="tailsieve",
        model="tailsieve-emulated",
        sampling=SamplingParams(max_tokens=32768, temperature=0.7, seed=0),
        replay=lengths,
        profile=str(profile_path),
        split_groups=not args.one_request_per_group,
        return_token_ids=not args.counts_only,
    )
    prompts = iter(PromptInput(p, text=f"Solve {p}.") for p in wl.prompt_ids())
    rows = []
    async with TailSieveRollout(urls, cfg) as ro:
        for t in range(args.steps + 1):
            lengths.step = t
            batch_prompts = [next(prompts) for _ in range(ro.num_fresh_needed())]
            c0, w0 = time.process_time(), time.perf_counter()
            batch = await ro.step(batch_prompts)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            n_req = batch.metrics.num_launched * (
                args.group_size if not args.one_request_per_group else 1
            )
            tokens = sum(r.num_tokens for g in batch.groups for r in g.responses)
            rows.append(
                {
                    "step": t,
                    "wall_s": wall,
                    "router_cpu_s": cpu,
                    "cpu_fraction": cpu / wall,
                    "num_requests": n_req,
                    "delivered_tokens": tokens,
                    "cpu_ms_per_request": 1e3 * cpu / max(1, n_req),
                    "cpu_us_per_delivered_token": 1e6 * cpu / max(1, tokens),
                    "q": batch.metrics.q,
                    "m": batch.metrics.m,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2, help="steps after the warm-up step")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--profile", default=DEFAULT_PROFILE)
    ap.add_argument("--one-request-per-group", action="store_true")
    ap.add_argument(
        "--counts-only",
        action="store_true",
        help="do not ask for per-response token ids (usage gives exact counts when split)",
    )
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/router.json"))
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    scaled = load_profile(args.profile).scaled(args.time_scale)
    profile_path = args.out.with_suffix(".profile.json")
    scaled.save(profile_path)
    with EmulatorFleet.start(
        args.replicas,
        profile=args.profile,
        time_scale=args.time_scale,
        startup_timeout_s=180.0,
        max_model_len=65536,
        max_num_seqs=4096,
    ) as fleet:
        rows = asyncio.run(run(args, fleet.urls, profile_path))
    profile_path.unlink(missing_ok=True)
    steady = rows[1:] or rows
    worst = max(r["cpu_fraction"] for r in steady)
    result = {
        "benchmark": "router_overhead",
        "replicas": args.replicas,
        "groups": args.groups,
        "group_size": args.group_size,
        "split_groups": not args.one_request_per_group,
        "time_scale": args.time_scale,
        "profile": args.profile,
        "return_token_ids": not args.counts_only,
        "steps": rows,
        "max_cpu_fraction_after_warmup": worst,
        "mean_cpu_fraction_after_warmup": sum(r["cpu_fraction"] for r in steady) / len(steady),
        "target_cpu_fraction": 0.05,
        "pass": worst < 0.05,
        "loadavg": os.getloadavg(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}, indent=1))


if __name__ == "__main__":
    main()
