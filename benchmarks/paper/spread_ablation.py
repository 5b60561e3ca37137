"""Issue 11: where routing matters on the grounded GPU model, and which protocol lever pays.

Every row runs through the real step protocol on the same prompts and lengths as Uniform
(paired per step), on the grounded profiles ``qwen3-4b-h100`` (R = 8) and
``qwen3-30b-a3b-h100-tp2`` (R = 4), N = 64 groups x 8, 5 seeds. Rows:

* baselines: Uniform Oracle, Seer-style Oracle, top-k oracle (they read lengths);
* ``tailsieve``: the hierarchical controller from q0 = 1, m0 = 0 with spread dealing (default);
* ``tailsieve-groups``: the same controller with whole groups (the paper's dealing);
* ``tailsieve from m0=3``: the default controller started inside isolation (q0 = 1, m0 = 3);
* static points through the protocol (``tailsieve-static``), the ablation grid: spread on/off,
  balance (m = 0) with and without a cutoff (c extra groups), isolation (q, m) with c = q.

Speedup: per seed the mean paired per-step ratio ``T_uniform(t) / T_policy(t)`` over the steady
steps (``sim.speedup_stats``: t >= 5), then the seed mean with a 95% Student-t interval; the
paper's last-three-steps column beside it. The controller's gap is measured against the best
static point of the grid (chosen by its seed mean). ``delivered_length_ratio``: mean delivered
response length over the steady steps divided by Uniform's on the same prompts (1 = no
routing-induced length bias; a cutoff delivers the first attempts that finished early).

Run: ``.venv/bin/python -m benchmarks.paper.spread_ablation [--quick]`` (writes
``benchmarks/results/paper/spread_ablation.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.control.static import StaticController
from tailsieve.core.controller import Controller
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings
from tailsieve.sim.records import PolicyRun
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import (
    STEADY_FROM,
    last_steps_speedup,
    seed_speedup,
    t_interval,
)
from tailsieve.sim.workloads import resolve_workload

from .common import PairedRuns, Timer, default_out, delivered_lengths, simulate, write_json

NAME = "spread_ablation"
N, GROUP = 64, 8
BASELINES = ("uniform", "uniform-oracle", "seer-oracle", "topk-oracle")
# (profile, replicas, workload)
CASES = (
    ("qwen3-4b-h100", 8, "paper-math"),
    ("qwen3-4b-h100", 8, "aime"),
    ("qwen3-4b-h100", 8, "paper-math/weak"),
    ("qwen3-4b-h100", 8, "paper-math/strong"),
    ("qwen3-30b-a3b-h100-tp2", 4, "paper-math"),
)
Static = tuple[int, int, int, bool]  # (q, m, c, spread)


def _steady(step: int) -> bool:
    return step >= STEADY_FROM


def static_grid(num_replicas: int) -> list[Static]:
    """Balance (m = 0) with c = 0, 4, 8; isolation with c = q, spread and whole groups."""
    pts: list[Static] = [(0, 0, 0, False), (0, 0, 0, True), (0, 0, 4, True), (0, 0, 8, True)]
    for m in sorted({1, 2, num_replicas // 2, num_replicas - 2} - {0}):
        for q in (2 * m, 4 * m):
            if q <= 24:
                pts.extend([(q, m, q, True), (q, m, q, False)])
    return pts


def label(pt: Static) -> str:
    q, m, c, spread = pt
    mode = "spread" if spread else "groups"
    return f"static q={q} m={m} c={c} {mode}"


def _static(pt: Static) -> Any:
    def make(name: str, s: SimSettings, p: PoolConfigs) -> Controller:
        q, m, c, spread = pt
        return StaticController(q, m, s.num_groups, s.num_replicas, num_extra=c, spread=spread)

    return make


def _controller(spread: bool, m0: int = 0) -> Any:
    def make(name: str, s: SimSettings, p: PoolConfigs) -> Controller:
        cfg = dataclasses.replace(s.controller_config(), spread=spread, m0=m0)
        return HierarchicalController(cfg, p.tail.throughput, p.bulk.throughput)

    return make


def run_case(profile: str, num_replicas: int, workload: str, seeds: tuple[int, ...],
             num_steps: int, grid: list[Static]) -> dict[str, Any]:
    """Every row of one (profile, R, workload) over the seeds."""
    pools = PoolConfigs.single(ReplicaConfig(load_profile(profile)))
    runs: dict[str, list[tuple[PolicyRun, PolicyRun]]] = {}
    lens: dict[str, list[float]] = {}  # mean delivered length / Uniform's, steady steps
    for seed in seeds:
        name, _, strength = workload.partition("/")
        wl = resolve_workload(name, strength or None, seed=seed, num_prompts=2000)
        s = SimSettings(num_replicas=num_replicas, num_groups=N, group_size=GROUP,
                        num_steps=num_steps, seed=seed, q0=1, m0=0)
        base = simulate(BASELINES, s, wl, pools)
        uni = base.run("uniform")
        uni_len = float(delivered_lengths(base, "uniform", _steady).mean())
        for b in BASELINES[1:]:
            runs.setdefault(b, []).append((uni, base.run(b)))
            lens.setdefault(b, []).append(1.0)

        def add(row: str, paired: PairedRuns, uni: PolicyRun = uni,
                uni_len: float = uni_len) -> None:
            runs.setdefault(row, []).append((uni, paired.run("tailsieve")))
            got = float(delivered_lengths(paired, "tailsieve", _steady).mean())
            lens.setdefault(row, []).append(got / uni_len)

        for row, spread, m0 in (("tailsieve", True, 0), ("tailsieve-groups", False, 0),
                                ("tailsieve from m0=3", True, min(3, num_replicas - 1))):
            add(row, simulate(["tailsieve"], s, wl, pools, _controller(spread, m0)))
        for pt in grid:
            add(label(pt), simulate(["tailsieve"], s, wl, pools, _static(pt)))
    rows = {name: _row(pairs) for name, pairs in runs.items()}
    for name, ratios in lens.items():
        rows[name]["delivered_length_ratio"] = sum(ratios) / len(ratios)
    statics = {k: v for k, v in rows.items() if k.startswith("static")}
    best = max(statics, key=lambda k: statics[k]["speedup"])
    ts = rows["tailsieve"]["speedup"]
    return {
        "profile": profile, "replicas": num_replicas, "workload": workload, "rows": rows,
        "best_static": best,
        "controller_gap_to_best_static": ts / statics[best]["speedup"] - 1.0,
        "beats_uniform_oracle": ts > rows["uniform-oracle"]["speedup"],
    }


def _row(pairs: list[tuple[PolicyRun, PolicyRun]]) -> dict[str, Any]:
    steady = [seed_speedup(u, p) for u, p in pairs]
    last3 = [last_steps_speedup(u, p) for u, p in pairs]
    m, lo, hi = t_interval(steady)
    m3, lo3, hi3 = t_interval(last3)
    runs = [p for _, p in pairs]
    return {
        "speedup": m, "ci95": [lo, hi], "per_seed": steady,
        "last3_speedup": m3, "last3_ci95": [lo3, hi3],
        "wasted_token_fraction": sum(r.wasted_token_fraction for r in runs) / len(runs),
        "final_qm": [(r.q_trajectory[-1], r.m_trajectory[-1]) for r in runs],
        "max_decision_ms": 1e3 * max(r.max_decision_s for r in runs),
    }


# paper Table 1 (DeepScaleR, N = 64): (TailSieve, Uniform Oracle) speedups over Uniform
PAPER = {"qwen3-4b-h100": (1.254, 1.225), "qwen3-30b-a3b-h100-tp2": (1.112, 1.085)}


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None,
        cases: tuple[tuple[str, int, str], ...] = CASES,
        grid: list[Static] | None = None) -> dict[str, Any]:
    """Every case: 14 steps x 5 seeds (10 x 2 ``quick``)."""
    timer = Timer()
    seed_list = seeds if seeds is not None else ((0, 1) if quick else (0, 1, 2, 3, 4))
    num_steps = steps if steps is not None else (10 if quick else 14)
    results = [run_case(p, r, w, seed_list, num_steps, grid or static_grid(r))
               for p, r, w in cases]
    _plot(out_dir / f"{NAME}.png", results)
    payload: dict[str, Any] = {
        "name": NAME, "quick": quick,
        "settings": {"groups": N, "group_size": GROUP, "steps": num_steps,
                     "seeds": list(seed_list), "controller_start": {"q0": 1, "m0": 0},
                     "steady": "paired per-step ratio over steps >= 5, seed mean, 95% t"},
        "cases": results,
        "paper": {"table1_tailsieve_vs_uniform_oracle": PAPER},
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, cases: list[dict[str, Any]]) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    from .common import savefig

    rows = ("uniform-oracle", "seer-oracle", "topk-oracle", "tailsieve-groups", "tailsieve")
    fig, ax = plt.subplots(figsize=(2.2 * len(cases) + 2, 4))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        ys = [c["rows"][row]["speedup"] for c in cases]
        ax.bar(np.arange(len(cases)) + (i - len(rows) / 2 + 0.5) * width, ys, width, label=row)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(cases)),
                  [f"{c['profile']}\nR={c['replicas']} {c['workload']}" for c in cases],
                  fontsize=7)
    ax.set_ylabel("steady paired speedup vs uniform")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    savefig(fig, path)


# --smoke: the smallest shape that runs every row kind (2 seeds for the confidence interval)
SMOKE: dict[str, Any] = {"steps": 6, "seeds": (0, 1), "cases": (("qwen3-4b-h100", 4, "paper-math"),),
                         "grid": [(0, 0, 0, True), (4, 2, 4, True)]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="one tiny case: checks the code runs")
    ap.add_argument("--out", type=Path, default=default_out("paper"),
                    help="folder (default: under the system temp dir)")
    args = ap.parse_args(argv)
    payload = run(args.out, args.quick, **(SMOKE if args.smoke else {}))
    for c in payload["cases"]:
        print(f"== {c['profile']} R={c['replicas']} {c['workload']}: best {c['best_static']}, "
              f"controller gap {c['controller_gap_to_best_static']:+.1%}")
        for name, r in c["rows"].items():
            lo, hi = r["ci95"]
            ci = f"[{lo:.3f}, {hi:.3f}]" if lo is not None else ""
            print(f"  {name:34s} {r['speedup']:.3f}x {ci:16s} last3 {r['last3_speedup']:.3f}x "
                  f"waste {r['wasted_token_fraction']:.1%} len {r['delivered_length_ratio']:.3f} "
                  f"final {r['final_qm'][:3]}")


if __name__ == "__main__":
    main()
