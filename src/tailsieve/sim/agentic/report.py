"""Tables of agentic comparisons (Markdown), shared by ``tailsieve agentic simulate`` and
``benchmarks/bench_agentic.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailsieve.sim.agentic.policies import BASELINE
from tailsieve.sim.speedup_stats import t_interval

__all__ = ["best_other", "format_speedup", "oracle_share", "over_best_other", "policy_table"]

OWN = ("tailsieve", "tailsieve-boundary", "tailsieve-midturn", "oracle")
LEVERS = ("affinity-margin-priority",)  # a user's router with TailSieve's priority lever


def _own(policy: str) -> bool:
    """TailSieve, its ablations and lever variants, the oracles: not a router users run."""
    return policy in OWN or policy in LEVERS or policy.startswith(("tailsieve-", "oracle-"))


def format_speedup(row: Mapping[str, Any]) -> str:
    """``1.234x [1.200, 1.268]`` (no interval with one seed)."""
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if lo is None or hi is None:
        return f"{row['speedup']:.3f}x"
    return f"{row['speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"


def best_other(rows: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The fastest router users run today, verl's default excluded (None: none ran)."""
    others = [p for p in rows if not _own(p) and p != BASELINE]
    return max(others, key=lambda p: rows[p]["speedup"]) if others else None


def oracle_share(rows: Mapping[str, Mapping[str, Any]], policy: str = "tailsieve") -> float | None:
    """``(policy - 1) / (oracle - 1)``: the share of the oracle's gain over verl's default
    (None where the oracle gains nothing or either is missing)."""
    if policy not in rows or "oracle" not in rows:
        return None
    gain = rows["oracle"]["speedup"] - 1.0
    return (rows[policy]["speedup"] - 1.0) / gain if gain > 0.005 else None


def over_best_other(rows: Mapping[str, Mapping[str, Any]],
                    policy: str = "tailsieve") -> dict[str, Any] | None:
    """``policy`` over the cell's best other router, paired per seed (the ratio of their
    per-seed speedups over verl's default, i.e. ``T_best / T_policy`` with one measured
    step), with a 95% Student-t interval; None where either is missing."""
    best = best_other(rows)
    if best is None or policy not in rows:
        return None
    ratios = [a / b for a, b in zip(rows[policy]["per_seed"], rows[best]["per_seed"],
                                    strict=True)]
    mean, lo, hi = t_interval(ratios)
    return {"policy": policy, "best_other": best, "speedup": mean, "ci_low": lo,
            "ci_high": hi, "per_seed": ratios}


def policy_table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """Every policy of one cell: speedup over verl's default, step time, hit rate,
    re-prefilled tokens and moves per step."""
    lines = ["| policy | over verl-sticky (95% CI) | step s | prefix hit | re-prefilled "
             "Mtok/step | boundary moves/step | mid-turn moves/step |",
             "|---|---|---|---|---|---|---|"]
    for p, r in rows.items():
        lines.append(
            f"| {p} | {format_speedup(r)} | {r['step_s']:.1f} | {r['hit_rate']:.3f} | "
            f"{r['reprefilled_tokens_per_step'] / 1e6:.2f} | {r['boundary_moves_per_step']:.0f} "
            f"| {r['midturn_moves_per_step']:.0f} |")
    return "\n".join(lines)
