"""Issue 11's must-show table: every policy on the grounded profiles, paired over 5 seeds.

* ``qwen3-4b-h100``, paper-math, R = 8, N = 64, n = 8 (target: tailsieve >= 1.20x and above
  Uniform Oracle);
* ``qwen3-30b-a3b-h100-tp2``, paper-math, R = 4 (target: above Uniform Oracle);
* ``qwen3-4b-h100`` with the weak and strong tails of paper-math and the AIME trace (target:
  never below 0.98x).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.sim.driver import ALL_POLICIES

from .common import (
    PROFILE_4B,
    PROFILE_30B,
    Timer,
    policy_row,
    pools_for,
    run_seeds,
    savefig,
    seeds_for,
    steps_for,
    write_json,
)

NAME = "headline"
# (label, workload, profile, R, N)
CONFIGS: tuple[tuple[str, str, str, int, int], ...] = (
    ("paper-math, 4B, R=8", "paper-math", PROFILE_4B, 8, 64),
    ("paper-math, 30B-A3B TP2, R=4", "paper-math", PROFILE_30B, 4, 64),
    ("weak tail, 4B, R=8", "paper-math/weak", PROFILE_4B, 8, 64),
    ("strong tail, 4B, R=8", "paper-math/strong", PROFILE_4B, 8, 64),
    ("AIME, 4B, R=8", "aime", PROFILE_4B, 8, 64),
)
PAPER = {"qwen3-4b": {"uniform-oracle": 1.225, "tailsieve": 1.254},
         "qwen3-30b-a3b": {"uniform-oracle": 1.085, "tailsieve": 1.112}}


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None,
        configs: tuple[tuple[str, str, str, int, int], ...] = CONFIGS,
        policies: tuple[str, ...] = ALL_POLICIES) -> dict[str, Any]:
    timer = Timer()
    num_steps, seed_list = steps_for(quick, steps), seeds_for(quick, seeds)
    out = []
    for label, wl, prof, r, n in configs:
        pools, used = pools_for(prof)
        runs = run_seeds(policies, seed_list, wl, pools, r, n, num_steps)
        out.append({"label": label, "workload": wl, "profile": used, "replicas": r,
                     "groups": n, "rows": [policy_row(p, runs) for p in policies]})
    _plot(out_dir / f"{NAME}.png", out)
    payload: dict[str, Any] = {
        "name": NAME, "quick": quick,
        "settings": {"steps": num_steps, "seeds": list(seed_list), "group_size": 8,
                     "profile_used": ", ".join(sorted({c["profile"] for c in out}))},
        "configs": out, "paper": PAPER, "runtime_s": timer.elapsed_s, "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, configs: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(max(6.0, 2.4 * len(configs)), 4))
    pols = [r["policy"] for r in configs[0]["rows"]]
    width = 0.8 / len(pols)
    for i, pol in enumerate(pols):
        ys, lo, hi = [], [], []
        for c in configs:
            st = next(r for r in c["rows"] if r["policy"] == pol)["paired"]
            ys.append(st["mean"])
            lo.append(st["mean"] - (st["ci_low"] if st["ci_low"] is not None else st["mean"]))
            hi.append((st["ci_high"] if st["ci_high"] is not None else st["mean"]) - st["mean"])
        x = np.arange(len(configs)) + (i - len(pols) / 2 + 0.5) * width
        ax.bar(x, ys, width, yerr=[lo, hi], capsize=2, label=pol)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(configs)), [c["label"] for c in configs], fontsize=8)
    ax.set_ylabel("paired steady speedup vs uniform")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    savefig(fig, path)
