"""Tables of agentic comparisons (Markdown), shared by ``tailsieve agentic simulate`` and
``benchmarks/bench_agentic.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailsieve.sim.agentic.policies import BASELINE

__all__ = ["best_other", "format_speedup", "oracle_share", "policy_table"]

OWN = ("tailsieve", "tailsieve-boundary", "tailsieve-midturn", "oracle")


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


def oracle_share(rows: Mapping[str, Mapping[str, Any]], policy: str = "tailsieve") -> float | None:
    """``(policy - 1) / (oracle - 1)``: the share of the oracle's gain over verl's default
    (None where the oracle gains nothing or either is missing)."""
    if policy not in rows or "oracle" not in rows:
        return None
    gain = rows["oracle"]["speedup"] - 1.0
    return (rows[policy]["speedup"] - 1.0) / gain if gain > 0.005 else None


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
