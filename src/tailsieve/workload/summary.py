"""One-call summary of a trace (what ``tailsieve trace stats`` prints)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailsieve.workload.analytics import (
    cross_checkpoint_auc,
    percentiles,
    split_half_auc,
    truncated_fraction,
    variance_decomposition,
)
from tailsieve.workload.trace import Trace


def trace_stats(
    trace: Trace, max_tokens: int | None = None, top_fraction: float = 0.1
) -> dict[str, Any]:
    """Summary statistics: sizes, length percentiles, truncation, variance shares and tail AUC.

    ``prompt_variance_share`` is ``SS_prompt / SS_total`` of raw lengths (two-way ANOVA,
    ``analytics.variance_decomposition``), ``prompt_variance_share_log`` the same on log lengths.
    Multi-checkpoint traces get ``tail_auc`` (mean over adjacent steps; ``tail_auc_by_step``
    lists each pair), single-checkpoint ones ``split_half_tail_auc``.
    """
    lens = trace.response_tokens
    q = percentiles(lens, (50, 90, 99))
    frac, cap = truncated_fraction(trace, max_tokens)
    raw = variance_decomposition(trace)
    log = variance_decomposition(trace, log=True)
    counts = np.bincount(trace.cell_index()[2])
    out: dict[str, Any] = {
        "source": trace.source,
        "num_rows": trace.num_rows,
        "num_prompts": trace.num_prompts,
        "num_steps": int(trace.steps.size),
        "num_samples": trace.num_rows,
        "samples_per_group_min": int(counts.min()),
        "samples_per_group_max": int(counts.max()),
        "mean": float(lens.mean()),
        "p50": q["p50"],
        "p90": q["p90"],
        "p99": q["p99"],
        "max": int(lens.max()),
        "p90_over_p50": q["p90"] / q["p50"] if q["p50"] > 0 else float("nan"),
        "truncated_fraction": frac,
        "truncation_source": _truncation_source(trace, max_tokens, cap),
        "truncation_cap_tokens": cap,
        "prompt_variance_share": raw.shares()["prompt"],
        "prompt_variance_share_log": log.shares()["prompt"],
        "variance_shares": raw.shares(),
        "variance_shares_log": log.shares(),
        "tail_top_fraction": top_fraction,
    }
    if trace.is_multi_checkpoint:
        pairs = cross_checkpoint_auc(trace, top_fraction)
        out["tail_auc"] = float(np.nanmean([p[2] for p in pairs]))
        out["tail_auc_by_step"] = [{"step": a, "next_step": b, "auc": v} for a, b, v in pairs]
    else:
        out["split_half_tail_auc"] = split_half_auc(trace, top_fraction)
    return out


def _truncation_source(trace: Trace, max_tokens: int | None, cap: int | None) -> str:
    if max_tokens is not None:
        return "max_tokens"
    if trace.finish_reason is not None:
        return "finish_reason"
    return "inferred_cap" if cap is not None else "none"
