"""Trace analytics: percentiles, truncation, variance decomposition and tail-ranking AUC.

Variance decomposition is the two-way ANOVA of paper appendix B on prompt x checkpoint cells
with replicate samples: ``SS_total = SS_prompt + SS_checkpoint + SS_interaction + SS_sampling``.
``SS_sampling`` is the within-cell sum of squares, ``SS_prompt`` / ``SS_checkpoint`` are the
weighted squared deviations of prompt / checkpoint means, and ``SS_interaction`` is the rest
(which equals the classic interaction sum of squares in a balanced design).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import TraceError
from tailsieve.workload.trace import IntArray, Trace

FloatArray = npt.NDArray[np.float64]


def percentiles(lengths: npt.ArrayLike, qs: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., ...}`` of the lengths (numpy's linear interpolation)."""
    arr = np.asarray(lengths, dtype=np.float64)
    if arr.size == 0:
        raise TraceError("no lengths to summarize")
    vals = np.percentile(arr, list(qs))
    return {f"p{q:g}": float(v) for q, v in zip(qs, vals, strict=True)}


def infer_truncation_cap(lengths: npt.ArrayLike) -> int | None:
    """The maximum length when many samples sit exactly at it (at least 3 and 0.1%), else None."""
    arr = np.asarray(lengths)
    top = int(arr.max())
    count = int(np.count_nonzero(arr == top))
    return top if count >= max(3, math.ceil(0.001 * arr.size)) else None


def truncated_fraction(trace: Trace, max_tokens: int | None = None) -> tuple[float, int | None]:
    """``(fraction, cap)``: ``finish_reason == 'length'`` when present; else the fraction at or
    above ``max_tokens``; else at an inferred cap (``infer_truncation_cap``), ``cap`` None = 0."""
    if trace.finish_reason is not None and max_tokens is None:
        return float(np.mean(trace.finish_reason == "length")), None
    cap = max_tokens if max_tokens is not None else infer_truncation_cap(trace.response_tokens)
    if cap is None:
        return 0.0, None
    return float(np.mean(trace.response_tokens >= cap)), int(cap)


@dataclass(frozen=True, slots=True)
class VarianceDecomposition:
    """Sums of squares of response length (tokens^2, or log-tokens^2 when ``log``)."""

    total: float
    prompt: float
    checkpoint: float
    interaction: float
    sampling: float
    log: bool = False

    def shares(self) -> dict[str, float]:
        """Each component as a fraction of the total."""
        t = self.total if self.total > 0 else 1.0
        return {
            "prompt": self.prompt / t,
            "checkpoint": self.checkpoint / t,
            "interaction": self.interaction / t,
            "sampling": self.sampling / t,
        }


def _values(trace: Trace, log: bool) -> FloatArray:
    y = trace.response_tokens.astype(np.float64)
    return np.log(np.maximum(y, 1.0)) if log else y


def variance_decomposition(trace: Trace, log: bool = False) -> VarianceDecomposition:
    """Two-way (prompt x checkpoint) ANOVA sums of squares with replicates (see module doc)."""
    y = _values(trace, log)
    grand = y.mean()
    _, _, cell = trace.cell_index()
    ncell = np.bincount(cell)
    cell_mean = np.bincount(cell, y) / ncell
    p = trace.prompt_codes
    np_ = np.bincount(p)
    pm = np.bincount(p, y) / np.maximum(np_, 1)
    _, s = np.unique(trace.step, return_inverse=True)
    ns = np.bincount(s)
    sm = np.bincount(s, y) / ns
    total = float(np.sum((y - grand) ** 2))
    sampling = float(np.sum((y - cell_mean[cell]) ** 2))
    prompt = float(np.sum(np_ * (pm - grand) ** 2))
    checkpoint = float(np.sum(ns * (sm - grand) ** 2))
    interaction = total - sampling - prompt - checkpoint
    tiny = 1e-12 * max(total, 1e-300)
    checkpoint = 0.0 if abs(checkpoint) < tiny else checkpoint
    interaction = 0.0 if abs(interaction) < tiny else interaction
    return VarianceDecomposition(total, prompt, checkpoint, interaction, sampling, log)


def between_prompt_share(matrix: npt.ArrayLike, log: bool = True) -> float:
    """Between-prompt share of variance of a ``(prompts, samples)`` length matrix."""
    y = np.asarray(matrix, dtype=np.float64)
    if log:
        y = np.log(np.maximum(y, 1.0))
    total = np.sum((y - y.mean()) ** 2)
    between = y.shape[1] * np.sum((y.mean(axis=1) - y.mean()) ** 2)
    return float(between / total) if total > 0 else 0.0


def auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count one half); NaN if one class is empty."""
    sc = np.asarray(scores, dtype=np.float64)
    lab = np.asarray(labels, dtype=bool)
    npos = int(lab.sum())
    nneg = lab.size - npos
    if npos == 0 or nneg == 0:
        return float("nan")
    order = np.argsort(sc, kind="mergesort")
    ranks = np.empty(sc.size)
    sorted_sc = sc[order]
    start = np.r_[0, np.flatnonzero(np.diff(sorted_sc)) + 1]
    end = np.r_[start[1:], sc.size]
    avg = (start + end + 1) / 2.0  # 1-based average rank of each tie block
    ranks[order] = np.repeat(avg, end - start)
    return float((ranks[lab].sum() - npos * (npos + 1) / 2) / (npos * nneg))


def top_labels(values: npt.ArrayLike, top_fraction: float) -> npt.NDArray[np.bool_]:
    """True for the ``ceil(top_fraction * n)`` largest values (ties broken by position)."""
    v = np.asarray(values, dtype=np.float64)
    if not 0 < top_fraction < 1:
        raise TraceError(f"top_fraction must be in (0, 1), got {top_fraction}")
    k = max(1, math.ceil(top_fraction * v.size))
    out = np.zeros(v.size, dtype=bool)
    out[np.argsort(-v, kind="stable")[:k]] = True
    return out


def prompt_means(trace: Trace, step: int) -> tuple[IntArray, FloatArray]:
    """``(prompt_codes, mean_length)`` of the prompts present at ``step``."""
    m = trace.step == step
    codes = trace.prompt_codes[m]
    cnt = np.bincount(codes, minlength=trace.num_prompts)
    tot = np.bincount(codes, trace.response_tokens[m].astype(np.float64), trace.num_prompts)
    present = np.flatnonzero(cnt)
    return present, tot[present] / cnt[present]


def tail_auc(trace: Trace, step_a: int, step_b: int, top_fraction: float = 0.1) -> float:
    """AUC of prompt mean length at ``step_a`` for the top ``top_fraction`` prompts by mean
    length at ``step_b`` (prompts present at both steps)."""
    ca, ma = prompt_means(trace, step_a)
    cb, mb = prompt_means(trace, step_b)
    common, ia, ib = np.intersect1d(ca, cb, return_indices=True)
    if common.size < 2:
        raise TraceError(f"{trace.source}: steps {step_a} and {step_b} share < 2 prompts")
    return auc(ma[ia], top_labels(mb[ib], top_fraction))


def cross_checkpoint_auc(trace: Trace, top_fraction: float = 0.1) -> list[tuple[int, int, float]]:
    """``tail_auc`` for every pair of adjacent steps."""
    steps = trace.steps.tolist()
    return [(a, b, tail_auc(trace, a, b, top_fraction)) for a, b in itertools.pairwise(steps)]


def split_half_auc(trace: Trace, top_fraction: float = 0.1) -> float:
    """Single-checkpoint stand-in for ``tail_auc``: each (prompt, step) cell's samples (in
    sample order) are split into a first and second half; the first-half mean scores the
    top ``top_fraction`` cells by second-half mean. Averaged over both directions."""
    order = np.lexsort((trace.sample, trace.step, trace.prompt_codes))
    _, _, cell = trace.cell_index()
    cell_sorted = cell[order]
    y = trace.response_tokens[order].astype(np.float64)
    ncell = np.bincount(cell_sorted)
    if ncell.min() < 2:
        raise TraceError(f"{trace.source}: split-half AUC needs >= 2 samples per prompt")
    start = np.r_[0, np.cumsum(ncell)[:-1]]
    pos = np.arange(y.size) - start[cell_sorted]
    first = pos < (ncell // 2)[cell_sorted]
    m1 = np.bincount(cell_sorted[first], y[first]) / np.bincount(cell_sorted[first])
    m2 = np.bincount(cell_sorted[~first], y[~first]) / np.bincount(cell_sorted[~first])
    return 0.5 * (auc(m1, top_labels(m2, top_fraction)) + auc(m2, top_labels(m1, top_fraction)))
