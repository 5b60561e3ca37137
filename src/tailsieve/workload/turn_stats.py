"""One-call summary of a turn trace (what ``tailsieve trace turns`` prints)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from tailsieve.workload.turns import TurnTrace

FloatArray = npt.NDArray[np.float64]


def _pct(values: npt.ArrayLike, prefix: str, qs: tuple[int, ...] = (50, 90)) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    out = {f"{prefix}_p{q}": float(np.percentile(arr, q)) for q in qs}
    out[f"{prefix}_max"] = float(arr.max())
    return out


def group_share(values: npt.ArrayLike, group_of: npt.ArrayLike) -> float:
    """Share of the variance of ``values`` between groups (one-way ANOVA, sum-of-squares
    ratio); NaN when there is no variance or a group has one member."""
    v = np.asarray(values, dtype=np.float64)
    g = np.unique(np.asarray(group_of), return_inverse=True)[1]
    counts = np.bincount(g)
    if v.size < 2 or counts.min() < 2:
        return float("nan")
    total = float(((v - v.mean()) ** 2).sum())
    if total == 0:
        return float("nan")
    means = np.bincount(g, weights=v) / counts
    return float((counts * (means - v.mean()) ** 2).sum() / total)


def turn_trace_stats(trace: TurnTrace) -> dict[str, Any]:
    """Sizes; percentiles of turns per trajectory, final context (prompt + outputs + tool
    outputs), per-turn output, tool seconds per call and per trajectory, tool output per call;
    the fraction ending at the context cap (``finish_reason`` ``length``); and the
    between-group share of the variance of log turns and of log mean turn output (None when
    undefined: no variance, or a group of one)."""
    trajs = trace.trajectories
    turns = np.array([t.num_turns for t in trajs])
    outs = np.array([u.output_tokens for t in trajs for u in t.turns])
    calls = [u for t in trajs for u in t.turns if u.has_tool]
    groups = [(t.prompt_id, t.step) for t in trajs]
    index = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    group_ids = np.array([index[g] for g in groups])
    mean_out = np.array([t.output_tokens / t.num_turns for t in trajs])
    out: dict[str, Any] = {
        "num_trajectories": len(trajs),
        "num_groups": len(index),
        "num_steps": len(trace.steps()),
        "num_turns": int(turns.sum()),
        "num_tool_calls": len(calls),
        "turns_mean": float(turns.mean()),
        **_pct(turns, "turns"),
        **_pct([t.prompt_tokens for t in trajs], "prompt_tokens"),
        **_pct([t.final_context_tokens for t in trajs], "context"),
        **_pct(outs, "turn_output", (50, 90, 99)),
        **_pct([t.tool_s for t in trajs], "tool_s_per_trajectory"),
    }
    if calls:
        out.update(_pct([u.tool_s for u in calls], "tool_s"))
        out.update(_pct([u.tool_output_tokens for u in calls], "tool_output"))
    out["truncated_fraction"] = float(np.mean([t.finish_reason == "length" for t in trajs]))
    for name, values in (("log_turns", np.log(turns)), ("log_turn_output", np.log(mean_out))):
        share = group_share(values, group_ids)
        out[f"group_share_{name}"] = None if math.isnan(share) else share
    return out
