"""Figure 6b: convergence of the hierarchical controller from different initial allocations.

``paper-math``, qwen3-4b-h100 profile, R = 4, N = 64, n = 8 (the paper's 2:2 split at convergence).

* inner loop: ``tailsieve-fixed`` (split held at R/2 : R/2) from q0 = 1 and q0 = N/2;
* outer loop: ``tailsieve`` from m0 = 0 (uniform) and m0 = 3 (tail-heavy).

Paper: all q trajectories converge to q = 4, both m trajectories to m = 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from tailsieve.sim.driver import SimSettings
from tailsieve.sim.workloads import resolve_workload

from .common import PROFILE, Timer, pools_for, savefig, simulate, write_json

NAME = "fig6b_convergence"
R, N, GROUP = 4, 64, 8
PAPER = {"q_converged": 4, "m_converged": 2}


def run(out_dir: Path, quick: bool, steps: int | None = None) -> dict[str, Any]:
    """q and m trajectories; 30 steps (15 with ``quick``)."""
    timer = Timer()
    num_steps = steps if steps is not None else (15 if quick else 30)
    wl = resolve_workload("paper-math", seed=0, num_prompts=3000)
    pools = pools_for(PROFILE)
    base = {"num_replicas": R, "num_groups": N, "group_size": GROUP, "num_steps": num_steps,
            "seed": 0}
    uni = simulate(["uniform"], SimSettings(**base), wl, pools).run("uniform")
    trajectories: list[dict[str, Any]] = []
    cases: list[tuple[str, str, dict[str, int]]] = [
        ("inner", "tailsieve-fixed", {"q0": 1}),
        ("inner", "tailsieve-fixed", {"q0": N // 2}),
        ("outer", "tailsieve", {"m0": 0}),
        ("outer", "tailsieve", {"m0": 3}),
    ]
    for loop, policy, init in cases:
        s = SimSettings(**base, **init)
        run_ = simulate([policy], s, wl, pools).run(policy)
        trajectories.append({
            "loop": loop,
            "policy": policy,
            "init": init,
            "q": run_.q_trajectory,
            "m": run_.m_trajectory,
            "step_s": [r.makespan_s for r in run_.regular],
            "final_q": run_.q_trajectory[-1],
            "final_m": run_.m_trajectory[-1],
            "steady_speedup_vs_uniform": uni.steady_step_s / run_.steady_step_s,
            "mean_speedup_vs_uniform": uni.mean_step_s / run_.mean_step_s,
        })
    _plot(out_dir / f"{NAME}.png", trajectories)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"workload": "paper-math", "profile": PROFILE, **base},
        "uniform_step_s": [r.makespan_s for r in uni.regular],
        "trajectories": trajectories,
        "paper": PAPER,
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def draw_trajectories(a: Any, b: Any, trajectories: list[dict[str, Any]]) -> None:
    """q over steps on axes ``a`` (inner and outer loop runs), m on ``b``, with the paper's
    converged values as reference lines."""
    for t in trajectories:
        init = ", ".join(f"{k}={v}" for k, v in t["init"].items())
        if t["loop"] == "inner":
            a.step(range(len(t["q"])), t["q"], where="post", label=f"{t['policy']} {init}")
        else:
            b.step(range(len(t["m"])), t["m"], where="post", label=f"m ({init})")
            a.step(range(len(t["q"])), t["q"], where="post", ls=":",
                   label=f"{t['policy']} {init} (q)")
    a.axhline(PAPER["q_converged"], color="k", ls="--", lw=0.8, label="paper q = 4")
    b.axhline(PAPER["m_converged"], color="k", ls="--", lw=0.8, label="paper m = 2")
    a.set_yscale("symlog", linthresh=8)


def _plot(path: Path, trajectories: list[dict[str, Any]]) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    draw_trajectories(a, b, trajectories)
    a.set(xlabel="step", ylabel="q (tail groups)", title="inner loop (split held 2:2)")
    b.set(xlabel="step", ylabel="m (tail replicas of 4)", title="outer loop")
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    savefig(fig, path)
