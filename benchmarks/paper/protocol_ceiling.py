"""The protocol's ceiling: the best *static* (q, m) through TailSieve's step protocol.

Issue 4 asks full TailSieve (R = 8, N = 64, n = 8, GPU profile) to reach 90% of the top-k
oracle's gain and to beat Uniform Oracle. A controller can only choose (q, m, c) step by step, so
what the protocol itself allows bounds what any controller reaches. This item measures it by
exhaustive search: every (q, m) on a grid is run through the real protocol (cutoff, abort,
regeneration from scratch, pinned carry-over) with ``tailsieve-static`` (``c = q``), on the same
prompts and lengths as the other policies, and the best grid point is reported next to the
oracles and the adaptive controller. Workloads: ``paper-math``, ``aime`` and the weak and strong
tails of ``paper-math`` (paper A.5), which also checks the "never lose more than 2%" target at
this setting.

* grid: m = 1..7, q in {m, 2m, 3m, 4m, 6m} with q <= 24 (the controller keeps q >= 2m; the
  q = m column shows what that floor costs), each with whole groups (the paper's dealing) and
  with spread groups (single responses dealt over the pool, issue 11), plus balance: m = 0 with
  spread groups and no cutoff;
* profile: the grounded ``qwen3-4b-h100`` (DESIGN 2b; ``--profile``-style argument ``profile``);
* speedups are paired per seed against ``uniform`` (mean over steps 1..S-1 and the steady mean
  of the last three steps), then averaged over seeds;
* the best static point is chosen once per workload by its seed-mean, not per seed (choosing
  per seed would use the outcome to pick the config).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.sim.driver import SimSettings
from tailsieve.sim.workloads import resolve_workload

from .common import PROFILE, Timer, fixed_factory, mean, pools_for, savefig, simulate, write_json

NAME = "protocol_ceiling"
R, N, GROUP = 8, 64, 8
REFERENCE = ("uniform", "uniform-oracle", "topk-oracle", "tailsieve-fixed", "tailsieve")

MULTIPLES = (1, 2, 3, 4, 6)


def grid(num_replicas: int = R, q_max: int = 24) -> list[tuple[int, int, bool]]:
    """(q, m, spread) points searched: balance (0, 0, spread); m = 1..R-1, q in {m, 2m, 3m,
    4m, 6m} up to ``q_max``, whole groups and spread."""
    out = [(0, 0, True)]
    for spread in (False, True):
        for m in range(1, num_replicas):
            out.extend((k * m, m, spread) for k in MULTIPLES if k * m <= q_max)
    return out


WORKLOADS = ("paper-math", "aime", "paper-math/weak", "paper-math/strong")


def resolve(spec: str, seed: int, num_prompts: int) -> Any:
    """``NAME`` or ``NAME/STRENGTH`` (the A.5 tail-strength transform: weak, strong)."""
    name, _, strength = spec.partition("/")
    return resolve_workload(name, strength or None, seed=seed, num_prompts=num_prompts)


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None,
        workloads: tuple[str, ...] = WORKLOADS, profile: str = PROFILE) -> dict[str, Any]:
    """The grid on each workload; 16 steps x 3 seeds (8 steps x 1 seed ``quick``)."""
    timer = Timer()
    num_steps = steps if steps is not None else (8 if quick else 16)
    seed_list = seeds if seeds is not None else ((0,) if quick else (0, 1, 2))
    points = grid(q_max=12) if quick else grid()
    pools = pools_for(profile)
    results: dict[str, Any] = {}
    for wl_name in workloads:
        ref: dict[str, list[tuple[float, float]]] = {p: [] for p in REFERENCE}
        static: dict[tuple[int, int, bool], list[tuple[float, float]]] = {pt: [] for pt in points}
        for seed in seed_list:
            wl = resolve(wl_name, seed, max(1000, 2 * num_steps * N))
            s = SimSettings(num_replicas=R, num_groups=N, group_size=GROUP,
                            num_steps=num_steps, seed=seed, q0=1, m0=0)
            paired = simulate(REFERENCE, s, wl, pools)
            uni = paired.run("uniform")
            for p in REFERENCE:
                sm = paired.run(p).summary(uni)
                ref[p].append((sm["mean_speedup_vs_uniform"], sm["speedup_vs_uniform"]))
            for q, m, spread in points:
                run_ = simulate(["tailsieve"], s, wl, pools,
                                controller_factory=fixed_factory(q, m, spread)).run("tailsieve")
                sm = run_.summary(uni)
                static[(q, m, spread)].append(
                    (sm["mean_speedup_vs_uniform"], sm["speedup_vs_uniform"])
                )
        refs = {p: {"mean_speedup": mean([x[0] for x in v]),
                    "steady_speedup": mean([x[1] for x in v]),
                    "per_seed_mean_speedup": [x[0] for x in v]} for p, v in ref.items()}
        table = [{"q": q, "m": m, "spread": spread, "mean_speedup": mean([x[0] for x in v]),
                  "steady_speedup": mean([x[1] for x in v]),
                  "per_seed_mean_speedup": [x[0] for x in v]}
                 for (q, m, spread), v in static.items()]
        best = max(table, key=lambda r: r["mean_speedup"])
        topk_gain = refs["topk-oracle"]["mean_speedup"] - 1.0

        def share(x: float, gain: float = topk_gain) -> float | None:
            return (x - 1.0) / gain if gain > 0 else None

        results[wl_name] = {
            "reference": refs,
            "static": table,
            "best_static": best,
            "best_static_share_of_topk_gain": share(best["mean_speedup"]),
            "tailsieve_share_of_topk_gain": share(refs["tailsieve"]["mean_speedup"]),
            "target_speedup_90pct_of_topk": 1.0 + 0.9 * topk_gain,
            "best_static_beats_uniform_oracle":
                best["mean_speedup"] > refs["uniform-oracle"]["mean_speedup"],
            "tailsieve_gap_to_best_static":
                refs["tailsieve"]["mean_speedup"] / best["mean_speedup"] - 1.0,
        }
    _plot(out_dir / f"{NAME}.png", results)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"replicas": R, "groups": N, "group_size": GROUP, "profile": profile,
                     "controller_start": {"q0": 1, "m0": 0},
                     "steps": num_steps, "seeds": list(seed_list), "grid": points,
                     "workloads": list(workloads)},
        "results": results,
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, results: dict[str, Any]) -> None:
    fig, axes = plt.subplots(1, len(results), figsize=(4.8 * len(results), 4.2), sharey=True)
    for ax, (wl, res) in zip(np.atleast_1d(axes), results.items(), strict=True):
        by_m: dict[tuple[int, bool], list[tuple[int, float]]] = {}
        for r in res["static"]:
            if r["m"] > 0:
                by_m.setdefault((r["m"], r["spread"]), []).append((r["q"], r["mean_speedup"]))
            else:
                ax.axhline(r["mean_speedup"], color="tab:green", lw=1.5, label="balance (spread)")
        for (m, spread), pts in sorted(by_m.items()):
            qs, ys = zip(*sorted(pts), strict=True)
            ax.plot(qs, ys, "o-" if spread else "x--", ms=4,
                    label=f"m={m} {'spread' if spread else 'groups'}")
        styles = {"uniform-oracle": ("k", "--"), "topk-oracle": ("tab:red", "--"),
                  "tailsieve": ("tab:purple", "-")}
        for name, (c, ls) in styles.items():
            ax.axhline(res["reference"][name]["mean_speedup"], color=c, ls=ls, lw=1.2,
                       label=name)
        ax.axhline(res["target_speedup_90pct_of_topk"], color="tab:red", ls=":", lw=1,
                   label="90% of top-k gain")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("q (tail groups, static)")
        ax.set_title(f"{wl}: static (q, m) through the protocol")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("mean speedup vs uniform")
    np.atleast_1d(axes)[0].legend(fontsize=7, ncol=2)
    savefig(fig, path)
