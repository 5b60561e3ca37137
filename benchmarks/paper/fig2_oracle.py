"""Figure 2 and appendix A.4: exact 2-replica oracle versus top-k tail isolation.

For each throughput profile (cpu, qwen3-4b-h100): a representative draw of 100 AIME response lengths
(seed 0) with the top-k sweep against the exact optimum (Figure 2b), and the distribution of
the best-k gap over random draws of 100 requests (appendix A.4; the paper: within 4%).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.model.profiles import load_profile
from tailsieve.oracle.summary import gap_study, sample_requests, summarize
from tailsieve.workload.io import read_trace

from .common import AIME_CSV, PROFILE, Timer, savefig, write_json

NAME = "fig2_oracle"
PAPER = {"best_k_gap_max": 0.04, "example_topk_s": 54.84, "example_tail_requests": 4}


def run(out_dir: Path, quick: bool, draws: int | None = None, num_requests: int = 100) -> dict[str, Any]:
    """Gap study on the AIME lengths; ``draws`` defaults to 100 (20 with ``quick``)."""
    timer = Timer()
    pool = np.asarray(read_trace(AIME_CSV).response_tokens, dtype=np.float64)
    num_draws = draws if draws is not None else (20 if quick else 100)
    profiles: dict[str, Any] = {}
    sweeps = {}
    for prof in ("cpu", PROFILE):
        model = load_profile(prof)
        example, opt, sweep = summarize(
            sample_requests(pool, num_requests, np.random.default_rng(0)), model
        )
        study = gap_study(pool, model, num_draws, num_requests, np.random.default_rng(0))
        gaps = np.array(study.gaps)
        profiles[prof] = {
            "num_draws": num_draws,
            "num_requests": num_requests,
            "gap_median": study.gap_median,
            "gap_mean": float(gaps.mean()),
            "gap_p90": study.gap_p90,
            "gap_max": study.gap_max,
            "share_within_4pct": float(np.mean(gaps <= 0.04)),
            "solve_s_median": study.solve_s_median,
            "gaps": list(study.gaps),
            "example": {
                **example.to_dict(),
                "optimal_tail_requests": int(min(np.sum(opt.assignment == 0),
                                                 np.sum(opt.assignment == 1))),
                "speedup_optimal_vs_uniform": example.uniform_makespan_s
                / example.optimal_makespan_s,
            },
        }
        sweeps[prof] = sweep
    _plot(out_dir / f"{NAME}.png", profiles, sweeps)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "data": AIME_CSV.name,
        "profiles": profiles,
        "paper": PAPER,
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, profiles: dict[str, Any], sweeps: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, prof in zip(axes[:2], ("cpu", PROFILE), strict=True):
        sw, ex = sweeps[prof], profiles[prof]["example"]
        k = np.arange(sw.tail_s.size)
        ax.plot(k, sw.tail_s, label="tail replica (k longest)")
        ax.plot(k, sw.bulk_s, label="bulk replica (rest)")
        ax.plot(k, sw.makespan_s, "k--", lw=1, label="top-k makespan")
        ax.axhline(ex["optimal_makespan_s"], color="r", lw=1, label="exact optimum")
        ax.axvline(sw.best_k, color="gray", ls=":", lw=1)
        ax.set_xlim(0, min(60, k[-1]))
        ax.set_ylim(0, 2.2 * ex["optimal_makespan_s"])
        ax.set_xlabel("k (requests isolated on the tail replica)")
        ax.set_ylabel("replica time (s)")
        ax.set_title(f"{prof}: best k={sw.best_k}, gap {ex['topk_gap']:.2%}")
        ax.legend(fontsize=7)
    ax = axes[2]
    for prof in ("cpu", PROFILE):
        g = np.sort(np.array(profiles[prof]["gaps"]) * 100)
        ax.plot(g, np.arange(1, g.size + 1) / g.size, label=prof)
    ax.axvline(4.0, color="r", ls="--", lw=1, label="paper bound 4%")
    ax.set_xlabel("best-k gap to exact optimum (%)")
    ax.set_ylabel("CDF over draws")
    ax.set_title("appendix A.4: 100-request draws")
    ax.legend(fontsize=8)
    savefig(fig, path)
