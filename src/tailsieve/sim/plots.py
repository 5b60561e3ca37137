"""PNG plots of a run's steps (matplotlib, Agg backend; no display needed): step times and
q/m from step records (what ``simulate.json`` and the report read), and a simulated step's
timeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tailsieve.core.pool import Pool
from tailsieve.sim.executor import SimStepResult
from tailsieve.workload.plots import finish, pyplot, save

Steps = Mapping[str, Sequence[Mapping[str, Any]]]


def steps_figure(steps: Steps) -> Figure | None:
    """Step time of every policy over its regular steps (flush excluded); the y axis starts at
    zero. ``steps``: per policy its step records (``StepRecord.to_dict``)."""
    if not steps:
        return None
    fig, ax = pyplot().subplots(figsize=(8, 4))
    for pol, recs in steps.items():
        xs = [r["step"] for r in recs if not r.get("is_flush")]
        ys = [r["makespan_s"] for r in recs if not r.get("is_flush")]
        ax.plot(xs, ys, marker="o", ms=3, label=pol)
    ax.set_ylim(bottom=0)
    finish(ax, "step", "step time (s)", "Step time per policy (axis from zero)", loc="lower right")
    return fig


def q_m_figure(steps: Steps, empty: bool = False) -> Figure | None:
    """q (tail groups) and m (tail replicas) over steps for every policy that sets them; None
    when none does (an empty figure with ``empty``)."""
    pols = {p: r for p, r in steps.items() if any(x.get("q", 0) or x.get("m", 0) for x in r)}
    if not pols and not empty:
        return None
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(10, 3.6))
    for pol, recs in pols.items():
        xs = [r["step"] for r in recs]
        a1.step(xs, [r.get("q", 0) for r in recs], where="post", label=pol)
        a2.step(xs, [r.get("m", 0) for r in recs], where="post", label=pol)
    finish(a1, "step", "", "q: tail groups", legend=bool(pols))
    finish(a2, "step", "", "m: tail replicas", legend=bool(pols))
    return fig


def plot_timeline(result: SimStepResult, num_replicas: int, title: str, path: Path) -> Path:
    """One step, one row per replica: a bar per group ending at its completion (or abort),
    tail groups orange, delivered bulk blue, aborted grey; the dashed line is the cutoff."""
    fig, ax = pyplot().subplots(figsize=(8, 0.5 * num_replicas + 1.5))
    for span in result.spans:
        color = "tab:orange" if span.pool is Pool.TAIL else "tab:blue" if span.delivered else "0.7"
        ax.barh(span.replica, span.end_s, height=0.6, color=color, alpha=0.25,
                edgecolor=color, linewidth=0.8)
    ax.axvline(result.cutoff_s, color="k", ls="--", lw=1, label="cutoff")
    out = result.outcome
    if out.tail_time_s > 0:
        ax.axvline(out.tail_time_s, color="tab:orange", ls=":", lw=1, label="tail done")
    ax.set_yticks(range(num_replicas))
    finish(ax, "seconds from step start", "replica",
           f"{title}: step {out.step}, makespan {out.makespan_s:.1f} s", loc="lower right")
    return save(fig, path)
