"""Section 4.5 analog: 30 steps on a drifting workload (the policy's length distribution
shifts from step to step), uniform versus TailSieve (and the top-k oracle for reference).

``paper-math`` with (a) a strong random-walk drift of the global log-length,
``drift_sigma_log = 0.1`` per step (the preset has 0.03), and (b) a trend,
``drift_mean_log = +0.03`` per step (lengths grow ~2.4x over 30 steps, as responses lengthen
during RL training). qwen3-4b-h100 profile, R = 8, N = 64, n = 8. Paper (Qwen3.5-2B GRPO, 30 steps):
119.3 s -> 82.5 s per rollout stage, 1.45x, and the gain persists as lengths evolve.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.sim.driver import SimSettings
from tailsieve.workload.presets import PRESETS
from tailsieve.workload.synthetic import SyntheticWorkload

from .common import (
    PROFILE,
    Timer,
    at_step,
    delivered_lengths,
    mean,
    pools_for,
    savefig,
    simulate,
    write_json,
)

NAME = "drift"
R, N, GROUP = 8, 64, 8
POLICIES = ("uniform", "topk-oracle", "tailsieve")
SCENARIOS: dict[str, dict[str, Any]] = {
    "random-walk sigma 0.1": {"drift_sigma_log": 0.1},
    "trend +0.03/step": {"drift_mean_log": 0.03, "drift_sigma_log": 0.03},
}
PAPER = {"uniform_s": 119.34, "tailsieve_s": 82.49, "speedup": 1.45}


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Per-step times and length medians; 30 steps x 2 seeds (15 x 1 with ``quick``)."""
    timer = Timer()
    num_steps = steps if steps is not None else (15 if quick else 30)
    seed_list = seeds if seeds is not None else ((0,) if quick else (0, 1))
    pools = pools_for(PROFILE)
    scenarios: dict[str, Any] = {}
    for label, change in SCENARIOS.items():
        per_seed: list[dict[str, Any]] = []
        for seed in seed_list:
            wl = SyntheticWorkload(replace(PRESETS["paper-math"], **change),
                                   num_prompts=max(1000, 2 * num_steps * N), seed=seed)
            s = SimSettings(num_replicas=R, num_groups=N, group_size=GROUP,
                            num_steps=num_steps, seed=seed)
            paired = simulate(POLICIES, s, wl, pools)
            uni = paired.run("uniform")
            step_s = {p: [r.makespan_s for r in paired.run(p).regular] for p in POLICIES}
            medians = [float(np.median(delivered_lengths(paired, "uniform", at_step(k))))
                       for k in range(num_steps)]
            per_step_speedup = [u / t for u, t in zip(step_s["uniform"], step_s["tailsieve"],
                                                      strict=True)]
            per_seed.append({
                "seed": seed,
                "step_s": step_s,
                "median_length": medians,
                "tailsieve_speedup_per_step": per_step_speedup,
                "mean_speedup": {p: uni.mean_step_s / paired.run(p).mean_step_s
                                 for p in POLICIES},
                "mean_step_s": {p: paired.run(p).mean_step_s for p in POLICIES},
                "q": paired.run("tailsieve").q_trajectory,
                "m": paired.run("tailsieve").m_trajectory,
                "steps_tailsieve_faster": int(sum(x > 1.0 for x in per_step_speedup[1:])),
            })
        scenarios[label] = {
            "change": change,
            "seeds": per_seed,
            "mean_speedup": {p: mean([x["mean_speedup"][p] for x in per_seed]) for p in POLICIES},
            "mean_step_s": {p: mean([x["mean_step_s"][p] for x in per_seed]) for p in POLICIES},
            "median_length_first_last": (per_seed[0]["median_length"][0],
                                         per_seed[0]["median_length"][-1]),
            "steps_tailsieve_faster": [x["steps_tailsieve_faster"] for x in per_seed],
        }
    _plot(out_dir / f"{NAME}.png", scenarios)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"workload": "paper-math + drift", "profile": PROFILE, "replicas": R,
                     "groups": N, "group_size": GROUP, "steps": num_steps,
                     "seeds": list(seed_list)},
        "scenarios": scenarios,
        "paper": PAPER,
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, scenarios: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, len(scenarios), figsize=(6.5 * len(scenarios), 4.2))
    for ax, (label, sc) in zip(np.atleast_1d(axes), scenarios.items(), strict=True):
        first = sc["seeds"][0]
        for p, ys in first["step_s"].items():
            ax.plot(range(len(ys)), ys, "o-" if p == "tailsieve" else "-", ms=3, label=p)
        ax.set_xlabel("step")
        ax.set_ylabel("step time (s)")
        ax2 = ax.twinx()
        ax2.plot(range(len(first["median_length"])), first["median_length"], "k:", lw=1,
                 label="median response length")
        ax2.set_ylabel("median response length (tokens)")
        ax.set_title(f"{label} (seed {first['seed']}); TailSieve mean "
                     f"{sc['mean_speedup']['tailsieve']:.3f}x")
        ax.legend(fontsize=7, loc="upper left")
        ax2.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    savefig(fig, path)
