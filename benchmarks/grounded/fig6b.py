"""Paper Figure 6b on the grounded profiles: convergence from different initial allocations.

R = 4, N = 64, n = 8, paper-math; ``qwen3.5-35b-a3b-h100-tp2`` (the paper's Figure 6 model) and
``qwen3-4b-h100``. Inner loop: ``tailsieve-fixed`` (split held) from q0 = 1 and q0 = N/2. Outer
loop: ``tailsieve`` from m0 = 0 (uniform) and m0 = 3 (tail-heavy). Paper: q -> 4, m -> 2.
``settled_at``: first step from which m stays at its final value and q within
``max(1, 25%)`` of its final value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from paper.fig6b_convergence import PAPER, draw_trajectories

from tailsieve.sim.speedup_stats import seed_speedup

from .common import (
    PROFILE_4B,
    STEADY_FROM,
    Timer,
    pools_for,
    run_seeds,
    savefig,
    write_json,
)

NAME = "fig6b"
R, N = 4, 64
PROFILE_35B = "qwen3.5-35b-a3b-h100-tp2"
CASES: tuple[tuple[str, str, dict[str, int]], ...] = (
    ("inner", "tailsieve-fixed", {"q0": 1}),
    ("inner", "tailsieve-fixed", {"q0": N // 2}),
    ("outer", "tailsieve", {"m0": 0}),
    ("outer", "tailsieve", {"m0": 3}),
)


def settled_at(qs: list[int], ms: list[int]) -> int:
    """First step from which (q, m) stay near their final values."""
    qf, mf = qs[-1], ms[-1]
    tol = max(1, round(0.25 * qf))
    t = len(qs)
    while t > 0 and ms[t - 1] == mf and abs(qs[t - 1] - qf) <= tol:
        t -= 1
    return t


def run(out_dir: Path, quick: bool, steps: int | None = None, seed: int = 0,
        profiles: tuple[str, ...] = (PROFILE_35B, PROFILE_4B)) -> dict[str, Any]:
    timer = Timer()
    num_steps = steps if steps is not None else (15 if quick else 30)
    panels, used_names = [], set()
    for prof in profiles:
        pools, used = pools_for(prof)
        used_names.add(used)
        trajectories = []
        for loop, policy, init in CASES:
            runs = run_seeds(["uniform", policy], (seed,), "paper-math", pools, R, N, num_steps,
                             **init)[0]
            r = runs[policy]
            qs, ms = r.q_trajectory, r.m_trajectory
            trajectories.append({
                "loop": loop, "policy": policy, "init": init, "q": qs, "m": ms,
                "final_q": qs[-1], "final_m": ms[-1], "settled_at": settled_at(qs, ms),
                "paired_speedup": (seed_speedup(runs["uniform"], r, STEADY_FROM)
                                   if num_steps > STEADY_FROM else None),
            })
        panels.append({"profile": prof, "profile_used": used, "trajectories": trajectories})
    _plot(out_dir / f"{NAME}.png", panels)
    payload: dict[str, Any] = {
        "name": NAME, "quick": quick,
        "settings": {"replicas": R, "groups": N, "group_size": 8, "steps": num_steps,
                     "seeds": [seed], "workload": "paper-math",
                     "profile_used": ", ".join(sorted(used_names))},
        "panels": panels, "paper": PAPER, "runtime_s": timer.elapsed_s, "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, panels: list[dict[str, Any]]) -> None:
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)), squeeze=False)
    for (a, b), panel in zip(axes, panels, strict=True):
        draw_trajectories(a, b, panel["trajectories"])
        a.set(xlabel="step", ylabel="q (tail groups)", title=f"{panel['profile']}: inner loop")
        b.set(xlabel="step", ylabel=f"m (tail replicas of {R})", title="outer loop")
        for ax in (a, b):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    savefig(fig, path)
