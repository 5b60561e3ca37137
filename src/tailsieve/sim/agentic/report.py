"""Tables of agentic comparisons (Markdown), shared by ``tailsieve agentic simulate`` and
``benchmarks/bench_agentic.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailsieve.sim.agentic.policies import BASELINE

__all__ = ["best_other", "format_speedup", "gain_share", "policy_table"]

OWN = ("tailsieve", "tailsieve-boundary", "tailsieve-midturn", "length-informed")


def format_speedup(row: Mapping[str, Any]) -> str:
    """``1.234x [1.200, 1.268]`` (no interval with one seed)."""
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if lo is None or hi is None:
        return f"{row['speedup']:.3f}x"
    return f"{row['speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"


def best_other(rows: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The fastest router users run today, verl's default excluded (None: none ran)."""
    others = [p for p in rows if p not in OWN and p != BASELINE]
    return max(others, key=lambda p: rows[p]["speedup"]) if others else None


def gain_share(speedup: float | None, reference: float | None) -> float | None:
    """``(speedup - 1) / (reference - 1)``: the share of a reference's gain over verl's
    default (the bound's ceiling, or the length-informed policy's) that a policy reaches
    (None where the reference gains under 0.5% or either is missing)."""
    if speedup is None or reference is None or reference - 1.0 <= 0.005:
        return None
    return (speedup - 1.0) / (reference - 1.0)


def policy_table(rows: Mapping[str, Mapping[str, Any]],
                 bound: Mapping[str, Any] | None = None) -> str:
    """Every policy of one cell: speedup over verl's default, step time, hit rate,
    re-prefilled tokens, moves and preemptions per step; last, the bound's ceiling."""
    lines = ["| policy | over verl-sticky (95% CI) | step s | prefix hit | re-prefilled "
             "Mtok/step | boundary moves/step | mid-turn moves/step | preemptions/step |",
             "|---|---|---|---|---|---|---|---|"]
    for p, r in rows.items():
        lines.append(
            f"| {p} | {format_speedup(r)} | {r['step_s']:.1f} | {r['hit_rate']:.3f} | "
            f"{r['reprefilled_tokens_per_step'] / 1e6:.2f} | {r['boundary_moves_per_step']:.0f} "
            f"| {r['midturn_moves_per_step']:.0f} | {r['preemptions_per_step']:.0f} |")
    if bound is not None:
        lines.append(f"| lower bound (ceiling) | {format_speedup(bound)} | "
                     f"{bound['step_s']:.1f} | - | - | - | - | - |")
    return "\n".join(lines)
