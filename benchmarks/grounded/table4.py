"""Paper Table 4 on the grounded profiles: routing-only speedup as concurrency grows.

R = 8, n = 8, paper-math, N = 64 / 128 / 256; ``qwen3-4b-h100`` and ``qwen3.5-4b-h100``;
TailSieve and its fixed-allocation variant beside Uniform Oracle, paired over seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from .common import (
    PROFILE_4B,
    PROFILE_35_4B,
    Timer,
    policy_row,
    pools_for,
    run_seeds,
    savefig,
    seeds_for,
    steps_for,
    write_json,
)

NAME = "table4"
R = 8
POLICIES = ("uniform", "uniform-oracle", "tailsieve-fixed", "tailsieve")
PAPER = {  # TailSieve, DeepScaleR, N = 64 / 128 / 256
    PROFILE_4B: {"64": 1.254, "128": 1.215, "256": 1.306},
    PROFILE_35_4B: {"64": 1.233, "128": 1.225, "256": 1.191},
}


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None, sizes: tuple[int, ...] = (64, 128, 256),
        profiles: tuple[str, ...] = (PROFILE_4B, PROFILE_35_4B)) -> dict[str, Any]:
    timer = Timer()
    num_steps, seed_list = steps_for(quick, steps), seeds_for(quick, seeds)
    cells = []
    used_names = set()
    for prof in profiles:
        pools, used = pools_for(prof)
        used_names.add(used)
        for n in sizes:
            runs = run_seeds(POLICIES, seed_list, "paper-math", pools, R, n, num_steps)
            cells.append({"profile": prof, "profile_used": used, "groups": n,
                          "paper_tailsieve": PAPER.get(prof, {}).get(str(n)),
                          "rows": [policy_row(p, runs) for p in POLICIES]})
    _plot(out_dir / f"{NAME}.png", cells, profiles, sizes)
    payload: dict[str, Any] = {
        "name": NAME, "quick": quick,
        "settings": {"replicas": R, "group_size": 8, "steps": num_steps, "seeds": list(seed_list),
                     "sizes": list(sizes), "workload": "paper-math",
                     "profile_used": ", ".join(sorted(used_names))},
        "cells": cells, "paper": PAPER, "runtime_s": timer.elapsed_s, "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, cells: list[dict[str, Any]], profiles: tuple[str, ...],
          sizes: tuple[int, ...]) -> None:
    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 3.8), squeeze=False)
    for ax, prof in zip(axes[0], profiles, strict=True):
        for i, pol in enumerate(POLICIES[1:]):
            ys, err = [], []
            for n in sizes:
                c = next(c for c in cells if c["profile"] == prof and c["groups"] == n)
                st = next(r for r in c["rows"] if r["policy"] == pol)["paired"]
                ys.append(st["mean"])
                err.append(0.0 if st["ci_high"] is None else st["ci_high"] - st["mean"])
            ax.errorbar(np.arange(len(sizes)) + 0.05 * i, ys, yerr=err, marker="o", capsize=3,
                        label=pol)
        paper = [PAPER.get(prof, {}).get(str(n)) for n in sizes]
        if all(p is not None for p in paper):
            ax.plot(np.arange(len(sizes)), paper, "k--", lw=0.8, label="paper TailSieve")
        ax.axhline(1.0, color="gray", lw=0.6)
        ax.set_xticks(np.arange(len(sizes)), [f"N={n}" for n in sizes])
        ax.set_title(prof)
        ax.set_ylabel("paired steady speedup vs uniform")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    savefig(fig, path)
