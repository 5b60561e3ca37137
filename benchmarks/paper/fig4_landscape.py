"""Figure 4: the T(q, m) landscape under weak (r = 1.5), real and strong (r = 6) tails.

Workload: ``paper-math`` through the A.5 tail-strength transform; R = 4 replicas, N = 64 groups
of n = 8, qwen3-4b-h100 profile (the paper's 4-replica slices, uniform = the 4:0 boundary).

* Predicted: the controller's model (``PoolTimePredictor``) on simulated history -- the
  delivered response work of the last ``HISTORY`` regular steps of a TailSieve run on that
  workload, each step's carried (regenerated tail) groups first -- for every m in 1..R-1 and
  q in 1..N-1, with q*(m) = argmin_q.
* Simulated ground truth: the step protocol run with a fixed (q, m, c = q) controller on a
  grid of q, mean step time over steps 1..S-1 (same prompt stream and lengths), and uniform
  routing (m = 0) on the same steps.
* Where the controller ends up: the final (q, m) of the ``tailsieve`` policy on that workload.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.control.predictor import PoolTimePredictor, StepWork
from tailsieve.sim.driver import SimSettings
from tailsieve.sim.workloads import resolve_workload

from .common import (
    PROFILE,
    PairedRuns,
    Timer,
    fixed_factory,
    mean,
    pools_for,
    savefig,
    simulate,
    write_json,
)

NAME = "fig4_landscape"
STRENGTHS = (("weak", "weak"), ("real", None), ("strong", "strong"))
R, N, GROUP = 4, 64, 8
HISTORY = 6
Q_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def history_from_run(paired: PairedRuns, policy: str, last: int) -> list[StepWork]:
    """Delivered response work of the last ``last`` regular steps (after the warm-up) of a
    protocol run: carried groups (regenerated candidates) first, by decreasing work."""
    out: list[StepWork] = []
    for r in [r for r in paired.run(policy).regular if r.step > 0][-last:]:
        drawn = set(r.drawn_ids)
        groups = [(pid, paired.lengths(pid, r.step)) for pid in r.delivered_ids]
        tail = sorted((g for g in groups if g[0] not in drawn), key=lambda g: -int(g[1].sum()))
        bulk = [g for g in groups if g[0] in drawn]
        out.append(StepWork([[int(x) for x in g[1]] for g in (*tail, *bulk)], len(tail)))
    return out


def run(out_dir: Path, quick: bool, steps: int | None = None,
        q_grid: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Landscapes for the three tail strengths (``quick``: fewer steps and a coarser grid)."""
    timer = Timer()
    num_steps = steps if steps is not None else (10 if quick else 20)
    gt_steps = max(4, num_steps // 2)
    grid = q_grid if q_grid is not None else ((1, 2, 4, 8, 16, 32) if quick else Q_GRID)
    pools = pools_for(PROFILE)
    scenes: dict[str, Any] = {}
    for label, strength in STRENGTHS:
        wl = resolve_workload("paper-math", tail_strength=strength, seed=0, num_prompts=2000)
        settings = SimSettings(num_replicas=R, num_groups=N, group_size=GROUP,
                               num_steps=num_steps, seed=0)
        paired = simulate(["uniform", "tailsieve"], settings, wl, pools)
        ts = paired.run("tailsieve")
        history = history_from_run(paired, "tailsieve", HISTORY)
        pred = PoolTimePredictor(N, R, pools.tail.throughput, pools.bulk.throughput)
        samples = pred.samples(history)
        uniform_pred = pred.predict_samples(samples, 0, 0).makespan()
        predicted: dict[str, Any] = {}
        for m in range(1, R):
            ps = [pred.predict_samples(samples, q, m) for q in range(1, N)]
            t = [p.makespan() for p in ps]
            best = int(np.argmin(t))
            predicted[str(m)] = {
                "q": list(range(1, N)), "makespan_s": t,
                "tail_s": [p.tail_s for p in ps], "bulk_s": [p.bulk_s for p in ps],
                "q_star": best + 1, "t_star_s": t[best],
            }
        # simulated ground truth on a q grid, fixed (q, m), c = q
        gt_settings = SimSettings(num_replicas=R, num_groups=N, group_size=GROUP,
                                  num_steps=gt_steps, seed=0)
        uni = simulate(["uniform"], gt_settings, wl, pools).run("uniform")
        simulated: dict[str, Any] = {}
        for m in range(1, R):
            t_q = []
            for q in grid:
                run_ = simulate(["tailsieve"], gt_settings, wl, pools,
                                controller_factory=fixed_factory(q, m)).run("tailsieve")
                t_q.append(mean([r.makespan_s for r in run_.regular if r.step > 0]))
            best = int(np.argmin(t_q))
            simulated[str(m)] = {"q": list(grid), "makespan_s": t_q, "q_star": grid[best],
                                 "t_star_s": t_q[best]}
        best_pred_m = min(predicted, key=lambda k: predicted[k]["t_star_s"])
        best_sim_m = min(simulated, key=lambda k: simulated[k]["t_star_s"])
        scenes[label] = {
            "tail_strength": strength or "real",
            "predicted": predicted,
            "predicted_uniform_s": uniform_pred,
            "predicted_best": {"m": int(best_pred_m), "q": predicted[best_pred_m]["q_star"]},
            "simulated": simulated,
            "simulated_uniform_s": uni.mean_step_s,
            "simulated_best": {"m": int(best_sim_m), "q": simulated[best_sim_m]["q_star"]},
            "controller_final": {"q": ts.q_trajectory[-1], "m": ts.m_trajectory[-1]},
            "controller_q_trajectory": ts.q_trajectory,
            "controller_m_trajectory": ts.m_trajectory,
            "tailsieve_steady_speedup": paired.run("uniform").steady_step_s / ts.steady_step_s,
            "tailsieve_mean_speedup": paired.run("uniform").mean_step_s / ts.mean_step_s,
        }
    _plot(out_dir / f"{NAME}.png", scenes)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"workload": "paper-math", "profile": PROFILE, "replicas": R, "groups": N,
                     "group_size": GROUP, "steps": num_steps, "ground_truth_steps": gt_steps,
                     "history_steps": HISTORY, "seed": 0},
        "scenes": scenes,
        "paper": {"note": "q*(m) and m* change with the tail strength; uniform is the 4:0 "
                          "boundary (Figure 4, no numeric values in the text)"},
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, scenes: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, len(scenes), figsize=(5.2 * len(scenes), 4.4), sharey=False)
    colors = {"1": "tab:blue", "2": "tab:orange", "3": "tab:green"}
    for ax, (label, sc) in zip(np.atleast_1d(axes), scenes.items(), strict=True):
        for m, p in sc["predicted"].items():
            c = colors.get(m)
            ax.plot(p["q"], p["makespan_s"], color=c, lw=1.2,
                    label=f"predicted {R - int(m)}:{m} (bulk:tail)")
            ax.plot(p["q_star"], p["t_star_s"], "o", color=c, ms=7, mfc="none")
            s = sc["simulated"][m]
            ax.plot(s["q"], s["makespan_s"], "x--", color=c, lw=0.8, ms=5,
                    label=f"simulated {R - int(m)}:{m}")
            ax.plot(s["q_star"], s["t_star_s"], "s", color=c, ms=7)
        ax.axhline(sc["simulated_uniform_s"], color="k", ls=":", lw=1,
                   label=f"uniform {R}:0 (simulated)")
        ax.axhline(sc["predicted_uniform_s"], color="gray", ls="-.", lw=1,
                   label=f"uniform {R}:0 (predicted)")
        cf = sc["controller_final"]
        if cf["m"] > 0:
            m = str(cf["m"])
            pq = sc["predicted"][m]
            y = pq["makespan_s"][min(len(pq["q"]), max(1, cf["q"])) - 1]
            ax.plot(cf["q"], y, "*", color="red", ms=14,
                    label=f"TailSieve final q={cf['q']}, m={cf['m']}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("q (tail groups)")
        ax.set_ylabel("T(q, m) (s)")
        ax.set_title(f"{label} tail: pred m*={sc['predicted_best']['m']}, "
                     f"sim m*={sc['simulated_best']['m']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    savefig(fig, path)
