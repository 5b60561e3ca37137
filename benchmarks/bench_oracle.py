"""Benchmark of the exact 2-replica oracle and reproduction of paper appendix A.4.

    .venv/bin/python benchmarks/bench_oracle.py --out benchmarks/results/oracle.json

Measures (AIME R1-Distill-1.5B response lengths, cpu and qwen3-4b-h100 profiles):
1. exact solve of n = 100 requests over 20 random draws: median/p95/max solve time and retained
   DP states;
2. the largest n solved exactly within the time limit (30 s): one seeded draw per n on a
   growing ladder, stopping at the first solve that runs out of time or at the ladder's end;
3. appendix A.4: over 100 draws of 100 requests, the best top-k gap to the exact optimum
   (median, P90, max; the paper reports best-k within 4%).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from outdir import default_out

from tailsieve.model.profiles import load_profile
from tailsieve.model.throughput import ThroughputModel
from tailsieve.oracle import OracleTimeoutError, solve_two_replicas, topk_sweep
from tailsieve.oracle.summary import gap_study, sample_requests
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

DEFAULT_DATA = AIME_TRACE_IN_REPO
LADDER = (100, 200, 300, 400, 500, 600, 800, 1000, 1500, 2000, 3000, 4000)


def load_pool(path: Path) -> np.ndarray:
    from tailsieve.workload.io import read_trace

    return np.asarray(read_trace(path).response_tokens, dtype=np.float64)


def bench_n100(pool: np.ndarray, model: ThroughputModel, draws: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    solve, states = [], []
    for _ in range(draws):
        lengths = sample_requests(pool, 100, rng)
        res = solve_two_replicas(lengths, model)
        assert res.makespan_s <= topk_sweep(lengths, model).best_makespan_s * (1 + 1e-12)
        solve.append(res.solve_s)
        states.append(res.retained_states)
    return {
        "profile": model.name,
        "num_requests": 100,
        "num_draws": draws,
        "solve_s_median": float(np.median(solve)),
        "solve_s_p95": float(np.percentile(solve, 95)),
        "solve_s_max": float(np.max(solve)),
        "retained_states_median": float(np.median(states)),
        "retained_states_max": int(np.max(states)),
    }


def bench_largest_n(
    pool: np.ndarray, model: ThroughputModel, limit_s: float, budget_s: float, seed: int
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    largest = 0
    started = time.perf_counter()
    stop = "ladder end"
    for n in LADDER:
        if n > pool.size:
            stop = "trace too small"
            break
        if time.perf_counter() - started > budget_s:
            stop = "benchmark budget"
            break
        lengths = sample_requests(pool, n, np.random.default_rng(seed + n))
        try:
            res = solve_two_replicas(lengths, model, time_limit_s=limit_s)
        except OracleTimeoutError:
            steps.append({"num_requests": n, "solved": False, "solve_s": None})
            stop = f"n={n} exceeded {limit_s:g} s"
            break
        steps.append(
            {
                "num_requests": n,
                "solved": True,
                "solve_s": res.solve_s,
                "retained_states": res.retained_states,
            }
        )
        largest = n
        print(
            f"  {model.name}: n={n} solved in {res.solve_s:.2f} s ({res.retained_states:,} states)",
            file=sys.stderr,
            flush=True,
        )
    return {
        "profile": model.name,
        "time_limit_s": limit_s,
        "largest_n_solved": largest,
        "stopped_because": stop,
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=default_out("oracle.json"),
                    help="result JSON (default: under the system temp dir)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--profiles", default="cpu,qwen3-4b-h100")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n100-draws", type=int, default=20)
    ap.add_argument("--gap-draws", type=int, default=100)
    ap.add_argument("--time-limit-s", type=float, default=30.0)
    ap.add_argument(
        "--scaling-budget-s",
        type=float,
        default=60.0,
        help="stop climbing the n ladder after this long per profile",
    )
    args = ap.parse_args(argv)
    pool = load_pool(args.data)
    models = [load_profile(p) for p in args.profiles.split(",")]
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_oracle.py " + " ".join(argv or sys.argv[1:]),
        "data": str(args.data.name),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "platform": platform.platform(),
        },
        "n100": [],
        "largest_n": [],
        "appendix_a4": [],
    }
    for m in models:
        print(f"n=100 x {args.n100_draws} draws, profile {m.name}", file=sys.stderr, flush=True)
        result["n100"].append(bench_n100(pool, m, args.n100_draws, args.seed))
    for m in models:
        print(f"largest n within {args.time_limit_s:g} s, profile {m.name}", file=sys.stderr)
        result["largest_n"].append(
            bench_largest_n(pool, m, args.time_limit_s, args.scaling_budget_s, args.seed)
        )
    for m in models:
        print(f"A.4 gap study, {args.gap_draws} draws, profile {m.name}", file=sys.stderr)
        study = gap_study(pool, m, args.gap_draws, 100, np.random.default_rng(args.seed))
        result["appendix_a4"].append(study.to_dict())
    result["total_s"] = time.perf_counter() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["n100"]:
        print(
            f"n=100 {row['profile']}: solve median {row['solve_s_median']:.3f} s, "
            f"p95 {row['solve_s_p95']:.3f} s, worst {row['solve_s_max']:.3f} s, "
            f"median states {row['retained_states_median']:,.0f}"
        )
    for row in result["largest_n"]:
        print(f"largest n {row['profile']}: {row['largest_n_solved']} ({row['stopped_because']})")
    for row in result["appendix_a4"]:
        print(
            f"A.4 {row['profile']}: best-k gap median {100 * row['gap_median']:.2f} %, "
            f"P90 {100 * row['gap_p90']:.2f} %, max {100 * row['gap_max']:.2f} %"
        )
    print(f"wrote {args.out} in {result['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
