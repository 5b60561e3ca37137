"""Tables 1 and 4 analogs: every routing policy, N = 64 / 128 / 256, two workloads, two profiles.

R = 8 replicas, n = 8 responses per group, ``paper-math`` (synthetic, calibrated) and ``aime``
(the real AIME R1-Distill trace, lengths resampled per prompt); qwen3-4b-h100 and cpu profiles. Every
number is averaged over seeds (the seed sets both the prompt order and the lengths).

* steady = mean of the last 3 regular steps (paper 4.2);
* mean = mean over steps 1..S-1 (after the warm-up step 0);
* speedups are paired against ``uniform`` per seed, then averaged;
* ratio to the lower bound: makespan / max(L_max tau(1), work / (R peak throughput)) of the
  delivered batch, mean over steps (and over the steady steps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.sim.driver import ALL_POLICIES, SimSettings
from tailsieve.sim.workloads import resolve_workload

from .common import PROFILE, Timer, mean, pools_for, savefig, simulate, write_json

NAME = "tables_policies"
R, GROUP = 8, 8
# Paper Table 1 (DeepScaleR, N = 64, five models) and Table 4 (TailSieve vs N, DeepScaleR)
PAPER_TABLE1 = {
    "uniform": (1.0, 1.0),
    "uniform-oracle": (1.085, 1.225),
    "streamrl-oracle": (0.928, 1.174),
    "seer-oracle": (1.082, 1.358),
    "tailsieve-fixed": (1.112, 1.219),
    "tailsieve": (1.112, 1.346),
}
PAPER_TABLE4 = {"64": (1.112, 1.346), "128": (1.023, 1.225), "256": (1.122, 1.306)}


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None, sizes: tuple[int, ...] | None = None,
        workloads: tuple[str, ...] = ("paper-math", "aime"),
        profiles: tuple[str, ...] = (PROFILE, "cpu")) -> dict[str, Any]:
    """All policies on every (workload, profile, N); 20 steps x 3 seeds (10 x 1 ``quick``)."""
    timer = Timer()
    num_steps = steps if steps is not None else (10 if quick else 20)
    seed_list = seeds if seeds is not None else ((0,) if quick else (0, 1, 2))
    ns = sizes if sizes is not None else (64, 128, 256)
    rows: list[dict[str, Any]] = []
    for wl_name in workloads:
        for prof in profiles:
            pools = pools_for(prof)
            for n_groups in ns:
                per_seed: dict[str, list[dict[str, Any]]] = {p: [] for p in ALL_POLICIES}
                for seed in seed_list:
                    wl = resolve_workload(wl_name, seed=seed,
                                          num_prompts=max(1000, int(1.5 * num_steps * n_groups)))
                    s = SimSettings(num_replicas=R, num_groups=n_groups, group_size=GROUP,
                                    num_steps=num_steps, seed=seed)
                    paired = simulate(ALL_POLICIES, s, wl, pools)
                    uni = paired.run("uniform")
                    for p in ALL_POLICIES:
                        summ = paired.run(p).summary(uni)
                        summ["final_q"] = summ["q_trajectory"][-1]
                        summ["final_m"] = summ["m_trajectory"][-1]
                        per_seed[p].append(summ)
                for p in ALL_POLICIES:
                    ss = per_seed[p]
                    rows.append({
                        "workload": wl_name, "profile": prof, "num_groups": n_groups,
                        "policy": p,
                        "steady_step_s": mean([x["steady_step_s"] for x in ss]),
                        "mean_step_s": mean([x["mean_step_s"] for x in ss]),
                        "steady_speedup": mean([x["speedup_vs_uniform"] for x in ss]),
                        "mean_speedup": mean([x["mean_speedup_vs_uniform"] for x in ss]),
                        "lb_ratio_mean": mean([x["lower_bound_ratio"] for x in ss]),
                        "lb_ratio_steady": mean([x["steady_lower_bound_ratio"] for x in ss]),
                        "wasted_token_fraction": mean([x["wasted_token_fraction"] for x in ss]),
                        "final_qm": [(x["final_q"], x["final_m"]) for x in ss],
                        "per_seed_steady_speedup": [x["speedup_vs_uniform"] for x in ss],
                    })
    _plot(out_dir / f"{NAME}.png", rows, workloads, profiles, ns)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"replicas": R, "group_size": GROUP, "steps": num_steps,
                     "seeds": list(seed_list), "sizes": list(ns), "workloads": list(workloads),
                     "profiles": list(profiles)},
        "rows": rows,
        "paper": {"table1_range_n64": PAPER_TABLE1, "table4_tailsieve_range": PAPER_TABLE4},
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, rows: list[dict[str, Any]], workloads: tuple[str, ...],
          profiles: tuple[str, ...], ns: tuple[int, ...]) -> None:
    combos = [(w, p) for w in workloads for p in profiles]
    fig, axes = plt.subplots(1, len(combos), figsize=(4.6 * len(combos), 4.2), sharey=True)
    width = 0.8 / len(ALL_POLICIES)
    for ax, (w, p) in zip(np.atleast_1d(axes), combos, strict=True):
        for i, pol in enumerate(ALL_POLICIES):
            ys = [next(r["steady_speedup"] for r in rows if r["workload"] == w
                       and r["profile"] == p and r["num_groups"] == n and r["policy"] == pol)
                  for n in ns]
            ax.bar(np.arange(len(ns)) + (i - len(ALL_POLICIES) / 2 + 0.5) * width, ys, width,
                   label=pol)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(ns)), [f"N={n}" for n in ns])
        lo = min(r["steady_speedup"] for r in rows)
        ax.set_ylim(min(0.6, lo - 0.05), max(1.4, max(r["steady_speedup"] for r in rows) + 0.05))
        ax.set_title(f"{w}, {p} profile")
        ax.grid(axis="y", alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("steady speedup vs uniform")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    savefig(fig, path)
