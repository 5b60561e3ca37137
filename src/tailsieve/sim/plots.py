"""PNG plots of a simulated run (matplotlib, Agg backend; no display needed)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tailsieve.core.pool import Pool
from tailsieve.sim.executor import SimStepResult
from tailsieve.sim.records import PolicyRun
from tailsieve.workload.plots import finish, pyplot, save


def plot_step_times(runs: Mapping[str, PolicyRun], path: Path) -> Path:
    """Step time of every policy over the regular steps."""
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for name, run in runs.items():
        rs = run.regular
        ax.plot([r.step for r in rs], [r.makespan_s for r in rs], marker="o", ms=3, label=name)
    finish(ax, "step", "step time (s)", "Simulated rollout step time")
    return save(fig, path)


def plot_controller(runs: Mapping[str, PolicyRun], path: Path) -> Path:
    """q (tail groups) and m (tail replicas) over steps for every policy that sets them."""
    fig, (ax_q, ax_m) = pyplot().subplots(2, 1, figsize=(7, 5), sharex=True)
    for name, run in runs.items():
        rs = run.regular
        if not any(r.q or r.m for r in rs):
            continue
        steps = [r.step for r in rs]
        ax_q.step(steps, [r.q for r in rs], where="post", label=name)
        ax_m.step(steps, [r.m for r in rs], where="post", label=name)
    finish(ax_q, "", "q (tail groups)", "Controller trajectory")
    finish(ax_m, "step", "m (tail replicas)", legend=False)
    return save(fig, path)


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
