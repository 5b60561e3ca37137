"""Section 4.3 analog: route-specialised speculation budgets, d_bulk + d_tail = 2 d_base.

``paper-math``, qwen3-4b-h100 profile, R = 8, N = 64, n = 8, MTP (acceptance 0.75 per drafted token,
the simulator's default). For each d_base in 1..4 and every split (d_bulk, d_tail) with
d_tail >= d_base: TailSieve (and the fixed-allocation variant and the top-k oracle) with the
tail pool at d_tail and the bulk pool at d_bulk, against Uniform with d_base on every replica
(the same total budget). Speedups are over plain Uniform without speculation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from tailsieve.sim.driver import SimSettings
from tailsieve.sim.workloads import resolve_workload

from .common import PROFILE, Timer, mean, pools_for, savefig, simulate, write_json

NAME = "spec_budget"
R, N, GROUP = 8, 64, 8
ROUTED = ("topk-oracle", "tailsieve-fixed", "tailsieve")
PAPER = {"routing_plus_mtp_speedup_range": (2.161, 2.586),
         "note": "route-specialised speculation beats uniform at every budget and shifts the "
                 "best budget upward (section 4.3, Figure 6a; no per-budget numbers in text)"}


def spec(d: int) -> str:
    """``mtp:d`` or ``none`` for depth 0."""
    return f"mtp:{d}" if d > 0 else "none"


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None, d_bases: tuple[int, ...] = (1, 2, 3, 4)
        ) -> dict[str, Any]:
    """Speedups per budget; 20 steps x 2 seeds (10 x 1 with ``quick``)."""
    timer = Timer()
    num_steps = steps if steps is not None else (10 if quick else 20)
    seed_list = seeds if seeds is not None else ((0,) if quick else (0, 1))
    rows: list[dict[str, Any]] = []
    for seed in seed_list:
        wl = resolve_workload("paper-math", seed=seed, num_prompts=2000)
        s = SimSettings(num_replicas=R, num_groups=N, group_size=GROUP, num_steps=num_steps,
                        seed=seed)
        plain = simulate(["uniform"], s, wl, pools_for(PROFILE)).run("uniform")
        for d_base in d_bases:
            uni = simulate(["uniform"], s, wl,
                           pools_for(PROFILE, spec(d_base), spec(d_base))).run("uniform")
            rows.append({"seed": seed, "d_base": d_base, "policy": "uniform",
                         "d_bulk": d_base, "d_tail": d_base,
                         "steady_speedup": plain.steady_step_s / uni.steady_step_s,
                         "mean_speedup": plain.mean_step_s / uni.mean_step_s})
            for d_bulk in range(d_base, -1, -1):
                d_tail = 2 * d_base - d_bulk
                pools = pools_for(PROFILE, spec(d_tail), spec(d_bulk))
                paired = simulate(ROUTED, s, wl, pools)
                for p in ROUTED:
                    r = paired.run(p)
                    rows.append({"seed": seed, "d_base": d_base, "policy": p,
                                 "d_bulk": d_bulk, "d_tail": d_tail,
                                 "steady_speedup": plain.steady_step_s / r.steady_step_s,
                                 "mean_speedup": plain.mean_step_s / r.mean_step_s,
                                 "final_qm": (r.q_trajectory[-1], r.m_trajectory[-1])})
    table = _aggregate(rows)
    _plot(out_dir / f"{NAME}.png", table, d_bases)
    payload: dict[str, Any] = {
        "name": NAME,
        "quick": quick,
        "settings": {"workload": "paper-math", "profile": PROFILE, "method": "mtp",
                     "replicas": R, "groups": N, "group_size": GROUP, "steps": num_steps,
                     "seeds": list(seed_list)},
        "table": table,
        "rows": rows,
        "paper": PAPER,
        "runtime_s": timer.elapsed_s,
        "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = sorted({(r["d_base"], r["policy"], r["d_bulk"], r["d_tail"]) for r in rows})
    out = []
    for d_base, pol, d_bulk, d_tail in keys:
        sel = [r for r in rows if (r["d_base"], r["policy"], r["d_bulk"], r["d_tail"])
               == (d_base, pol, d_bulk, d_tail)]
        out.append({"d_base": d_base, "policy": pol, "d_bulk": d_bulk, "d_tail": d_tail,
                    "steady_speedup": mean([r["steady_speedup"] for r in sel]),
                    "mean_speedup": mean([r["mean_speedup"] for r in sel]),
                    "final_qm": [r.get("final_qm") for r in sel]})
    return out


def _plot(path: Path, table: list[dict[str, Any]], d_bases: tuple[int, ...]) -> None:
    fig, axes = plt.subplots(1, len(d_bases), figsize=(3.6 * len(d_bases), 3.8), sharey=True)
    for ax, d_base in zip(axes if len(d_bases) > 1 else [axes], d_bases, strict=True):
        uni = next(r for r in table if r["d_base"] == d_base and r["policy"] == "uniform")
        ax.axhline(uni["mean_speedup"], color="k", ls="--", lw=1,
                   label=f"uniform d={d_base} everywhere")
        for pol in ROUTED:
            sel = sorted((r for r in table if r["d_base"] == d_base and r["policy"] == pol),
                         key=lambda r: r["d_tail"])
            ax.plot([f"{r['d_bulk']}/{r['d_tail']}" for r in sel],
                    [r["mean_speedup"] for r in sel], "o-", label=pol)
        ax.axhline(1.0, color="gray", lw=0.6)
        ax.set_title(f"d_base = {d_base}")
        ax.set_xlabel("d_bulk / d_tail")
        ax.grid(alpha=0.3)
    (axes[0] if len(d_bases) > 1 else axes).set_ylabel("mean speedup vs plain uniform")
    (axes[0] if len(d_bases) > 1 else axes).legend(fontsize=7)
    savefig(fig, path)
