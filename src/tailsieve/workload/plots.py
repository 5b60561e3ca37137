"""Matplotlib figures for the ``trace`` commands (Agg backend, written to a file), and the
helpers every plot module of the package shares (``pyplot``, ``finish``, ``save``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tailsieve.workload.analytics import prompt_means
from tailsieve.workload.capture import CaptureResult
from tailsieve.workload.trace import Trace


def pyplot():  # type: ignore[no-untyped-def]
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finish(ax: Any, xlabel: str, ylabel: str, title: str = "", legend: bool = True,
           **legend_kw: Any) -> None:
    """Label ``ax``, draw its grid and (``legend``) its legend at font size 8."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(**{"fontsize": 8, **legend_kw})


def save(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Lay out ``fig``, write it to ``path``, close it; returns the path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return Path(path)


def plot_length_cdf(trace: Trace, path: str | Path) -> None:
    """Empirical CDF of response lengths with P50/P90 marked."""
    plt = pyplot()
    lens = np.sort(trace.response_tokens)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(lens, np.arange(1, lens.size + 1) / lens.size, lw=1.5)
    for q in (50, 90):
        v = float(np.percentile(lens, q))
        ax.axvline(v, ls="--", lw=0.8, color="gray")
        ax.text(v, 0.02 + q / 200, f" P{q} {v:,.0f}", fontsize=8)
    finish(ax, "response length (tokens)", "fraction of responses",
           f"Length CDF: {Path(trace.source).name} ({trace.num_rows:,} responses)", legend=False)
    save(fig, path)


def plot_rank_persistence(trace: Trace, path: str | Path, top_fraction: float = 0.1) -> None:
    """Per-prompt rank (by mean length) at every step; prompts in the top ``top_fraction`` at
    the first step are highlighted."""
    plt = pyplot()
    steps = trace.steps.tolist()
    ranks = np.full((trace.num_prompts, len(steps)), np.nan)
    for j, s in enumerate(steps):
        codes, means = prompt_means(trace, s)
        order = np.argsort(np.argsort(-means))
        ranks[codes, j] = (order + 1) / codes.size
    top = ranks[:, 0] <= top_fraction
    fig, ax = plt.subplots(figsize=(6, 4))
    rng = np.random.default_rng(0)
    rest = np.flatnonzero(~top)
    for i in rng.choice(rest, size=min(rest.size, 200), replace=False):
        ax.plot(steps, ranks[i], color="lightgray", lw=0.5)
    for i in np.flatnonzero(top):
        ax.plot(steps, ranks[i], color="tab:red", lw=0.8, alpha=0.7)
    ax.invert_yaxis()
    ax.set_xticks(steps)
    ax.set_xlabel("step (checkpoint)")
    ax.set_ylabel("length rank (fraction, 0 = longest)")
    ax.set_title(f"Prompt length ranks across steps (red: top {top_fraction:.0%} at first step)")
    save(fig, path)


def plot_capture(results: Sequence[CaptureResult], path: str | Path, title: str = "") -> None:
    """Capture rate vs rho (same round, cross step, random baseline), like paper Figure 3."""
    plt = pyplot()
    x = np.arange(len(results))
    w = 0.27
    fig, ax = plt.subplots(figsize=(6, 4))
    series = [
        ("same round", [r.same_round_capture for r in results]),
        ("next step", [r.cross_step_capture for r in results]),
        ("random", [r.random_baseline for r in results]),
    ]
    for k, (label, vals) in enumerate(series):
        bars = ax.bar(x + (k - 1) * w, vals, w, label=label)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in vals], fontsize=7)
    ax.set_xticks(x, [f"ρ={r.rho:.0%}" for r in results])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("capture of ground-truth long-tail groups")
    ax.set_title(title or "Partial-rollout long-tail capture")
    ax.legend(fontsize=8)
    save(fig, path)
