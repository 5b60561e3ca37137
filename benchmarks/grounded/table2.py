"""Paper Table 2 on the grounded profiles: routing alone, + MTP on the tail, + DFlash on the tail.

R = 8, N = 64, n = 8, paper-math. Columns: routing only; the tail pool with MTP (3 speculative
tokens); the tail pool with DFlash (block size 4, i.e. ``dflash:4``). The bulk pool runs without
speculation. Speedups are paired against plain Uniform (no speculation); the row ``uniform +
spec`` puts the same speculation on every replica under Uniform routing, to separate what the
speculation gives from what route specialisation adds. Acceptance rates are the simulator's
defaults (``tailsieve.model.speculative.SPEC_DEFAULTS``), stated in the JSON and the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from tailsieve.model.speculative import SpecConfig
from tailsieve.sim.records import PolicyRun

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

NAME = "table2"
R, N = 8, 64
COLUMNS = (("routing", "none"), ("+MTP", "mtp:3"), ("+DFlash", "dflash:4"))
ROUTED = ("tailsieve-fixed", "tailsieve")
PAPER = {PROFILE_35_4B: {"routing": 1.199, "+MTP": 2.414, "+DFlash": 2.091},
         "note": "paper Table 2: TailSieve with fixed allocation, DeepScaleR, Qwen3.5-4B"}


def spec_info(spec: str) -> dict[str, Any]:
    s = SpecConfig.parse(spec)
    return {"spec": spec, "acceptance_per_token": s.acceptance if s.enabled else None,
            "tokens_per_step": s.tokens_per_step, "draft_cost": s.cost if s.enabled else None}


def run(out_dir: Path, quick: bool, steps: int | None = None,
        seeds: tuple[int, ...] | None = None,
        profiles: tuple[str, ...] = (PROFILE_35_4B, PROFILE_4B)) -> dict[str, Any]:
    timer = Timer()
    num_steps, seed_list = steps_for(quick, steps), seeds_for(quick, seeds)
    cells, used_names = [], set()
    for prof in profiles:
        plain, used = pools_for(prof)
        used_names.add(used)
        for col, spec in COLUMNS:
            tail_spec, _ = pools_for(prof, tail_spec=spec)
            runs = run_seeds(("uniform", *ROUTED), seed_list, "paper-math", plain, R, N,
                             num_steps, pools_by_policy=dict.fromkeys(ROUTED, tail_spec))
            rows_policies = ["uniform", *ROUTED]
            if spec != "none":
                everywhere, _ = pools_for(prof, tail_spec=spec, bulk_spec=spec)
                uni_spec = run_seeds(("uniform",), seed_list, "paper-math", everywhere, R, N,
                                     num_steps)
                merged: list[dict[str, PolicyRun]] = [
                    {**a, "uniform + spec": b["uniform"]}
                    for a, b in zip(runs, uni_spec, strict=True)
                ]
                runs = merged
                rows_policies.append("uniform + spec")
            cells.append({"profile": prof, "profile_used": used, "column": col,
                          **spec_info(spec),
                          "rows": [policy_row(p, runs) for p in rows_policies]})
    _plot(out_dir / f"{NAME}.png", cells, profiles)
    payload: dict[str, Any] = {
        "name": NAME, "quick": quick,
        "settings": {"replicas": R, "groups": N, "group_size": 8, "steps": num_steps,
                     "seeds": list(seed_list), "workload": "paper-math",
                     "columns": [spec_info(s) | {"column": c} for c, s in COLUMNS],
                     "profile_used": ", ".join(sorted(used_names))},
        "cells": cells, "paper": PAPER, "runtime_s": timer.elapsed_s, "png": f"{NAME}.png",
    }
    write_json(out_dir, NAME, payload)
    return payload


def _plot(path: Path, cells: list[dict[str, Any]], profiles: tuple[str, ...]) -> None:
    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 3.8), squeeze=False)
    pols = (*ROUTED, "uniform + spec")
    for ax, prof in zip(axes[0], profiles, strict=True):
        for i, pol in enumerate(pols):
            xs, ys = [], []
            for j, (col, _) in enumerate(COLUMNS):
                c = next(c for c in cells if c["profile"] == prof and c["column"] == col)
                row = next((r for r in c["rows"] if r["policy"] == pol), None)
                if row is not None:
                    xs.append(j + 0.25 * (i - 1))
                    ys.append(row["paired"]["mean"])
            ax.bar(xs, ys, 0.25, label=pol)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(COLUMNS)), [c for c, _ in COLUMNS])
        ax.set_title(prof)
        ax.set_ylabel("paired steady speedup vs plain uniform")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    savefig(fig, path)
