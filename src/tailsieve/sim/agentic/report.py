"""Tables of agentic comparisons (Markdown), shared by ``tailsieve agentic simulate`` and
``benchmarks/bench_agentic.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailsieve.sim.agentic.policies import BASELINE
from tailsieve.sim.speedup_stats import t_interval

__all__ = ["ROUTING_BOUND_GAIN", "best_other", "format_speedup", "gap_share",
           "over_best_other", "policy_table"]

OWN = ("tailsieve", "tailsieve-boundary", "tailsieve-midturn", "length-informed")
LEVERS = ("affinity-margin-priority",)  # a user's router with TailSieve's priority lever
ROUTING_BOUND_GAIN = 0.05  # a bound that gains at most this over verl's default leaves
# nothing worth routing for: the workload is not routing-bound


def _own(policy: str) -> bool:
    """TailSieve, its ablations and lever variants, the length-informed placements: not a
    router users run."""
    return (policy in OWN or policy in LEVERS
            or policy.startswith(("tailsieve-", "length-informed-", "oracle")))


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


def gap_share(speedup: float | None, bound: float | None) -> float | None:
    """The share of the gap between verl's step and the bound that a policy closes, in
    time: ``(T_verl - T_policy) / (T_verl - T_bound)`` written with speedups over verl
    (``(1 - 1/speedup) / (1 - 1/bound)``); None where the bound gains under 0.5% or either
    is missing."""
    if speedup is None or bound is None or bound - 1.0 <= 0.005:
        return None
    return (1.0 - 1.0 / speedup) / (1.0 - 1.0 / bound)


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


def policy_table(rows: Mapping[str, Mapping[str, Any]],
                 bound: Mapping[str, Any] | None = None) -> str:
    """Every policy of one cell: speedup over verl's default, step time, hit rate,
    re-prefilled tokens, moves and preemptions per step; last, the step's lower bound and
    the share of verl's gap to it each policy closes."""
    lines = ["| policy | over verl-sticky (95% CI) | step s | share of the gap to the bound "
             "| prefix hit | re-prefilled Mtok/step | boundary moves/step | mid-turn moves/step "
             "| preemptions/step |", "|---|---|---|---|---|---|---|---|---|"]
    for p, r in rows.items():
        share = gap_share(r["speedup"], bound["speedup"]) if bound is not None else None
        share_s = f"{share:.0%}" if share is not None else "-"
        lines.append(
            f"| {p} | {format_speedup(r)} | {r['step_s']:.1f} | {share_s} | "
            f"{r['hit_rate']:.3f} | {r['reprefilled_tokens_per_step'] / 1e6:.2f} | "
            f"{r['boundary_moves_per_step']:.0f} | {r['midturn_moves_per_step']:.0f} | "
            f"{r.get('preemptions_per_step', 0):.0f} |")
    if bound is not None:
        lines.append(f"| lower bound (no router passes it) | {format_speedup(bound)} | "
                     f"{bound['step_s']:.1f} | 100% | - | - | - | - | - |")
    return "\n".join(lines)
