"""PNG plots of a run (matplotlib, Agg backend). Each function writes one file and returns it,
or returns None when the run holds nothing for that plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tailsieve.core.timeline import StepTimeline
from tailsieve.report.run_data import RunData
from tailsieve.sim.plots import q_m_figure, steps_figure
from tailsieve.workload.plots import finish, pyplot, save

plt = pyplot()

POOL_COLORS = {"tail": "#d62728", "bulk": "#1f77b4"}


def step_times(run: RunData, path: Path) -> Path | None:
    """Step time of every policy over steps; the y axis starts at zero."""
    fig = step_times_figure(run)
    return None if fig is None else save(fig, path, dpi=110)


def step_times_figure(run: RunData) -> Figure | None:
    return steps_figure(run.steps)


def q_m_trajectories(run: RunData, path: Path) -> Path | None:
    fig = q_m_figure(run.steps)
    return None if fig is None else save(fig, path, dpi=110)


def predicted_vs_observed(run: RunData, path: Path) -> Path | None:
    """Per step, the controller's predicted pool times beside the observed ones."""
    pols = {
        p: [(r["step"], r["diagnostics"]) for r in recs
            if isinstance(r.get("diagnostics"), dict) and not r.get("is_flush")
            and r["diagnostics"].get("predicted_bulk_s") is not None]
        for p, recs in run.steps.items()
    }
    pols = {p: v for p, v in pols.items() if v}
    if not pols:
        return None
    fig, axes = plt.subplots(1, len(pols), figsize=(5.5 * len(pols), 3.8), squeeze=False)
    for ax, (pol, rows) in zip(axes[0], pols.items(), strict=True):
        xs = [s for s, _ in rows]
        for key, label, color in (("tail", "T_tail", POOL_COLORS["tail"]),
                                  ("bulk", "T_bulk_cut", POOL_COLORS["bulk"])):
            obs = [d[f"{key}_time_s" if key == "tail" else "bulk_cut_s"] for _, d in rows]
            pred = [d[f"predicted_{key}_s"] for _, d in rows]
            ax.plot(xs, obs, "o-", color=color, ms=3, label=f"{label} observed")
            ax.plot(xs, pred, "x--", color=color, ms=4, label=f"{label} predicted")
        finish(ax, "step", "seconds", f"{pol}: predicted vs observed pool times", fontsize=7)
    return save(fig, path, dpi=110)


def _draw_timeline(ax: Axes, tl: StepTimeline, title: str) -> None:
    for r in range(tl.num_replicas):
        bars = sorted((b for b in tl.bars if r in b.on_replicas), key=lambda b: b.end_s)
        for k, b in enumerate(bars):
            h = 0.8 / max(len(bars), 1)
            ax.barh(
                r - 0.4 + k * h + h / 2,
                b.end_s,
                height=h * 0.9,
                color=POOL_COLORS.get(b.pool, "grey"),
                alpha=0.35 if b.aborted else 0.85,
                hatch="//" if b.aborted else None,
                edgecolor="black" if b.pinned else "none",
                linewidth=0.6,
            )
    if tl.cutoff_s > 0:
        ax.axvline(tl.cutoff_s, color="black", ls="--", lw=1, label=f"cutoff {tl.cutoff_s:.1f} s")
    ax.axvline(tl.makespan_s, color="purple", ls=":", lw=1.5,
               label=f"step time {tl.makespan_s:.1f} s")
    ax.set_yticks(range(tl.num_replicas))
    tail = set(range(tl.num_replicas - tl.m, tl.num_replicas))
    ax.set_yticklabels(
        [f"r{r} ({'tail' if r in tail else 'bulk'})" for r in range(tl.num_replicas)]
    )
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds from step start")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")


def timelines_side_by_side(timelines: dict[str, StepTimeline], path: Path) -> Path | None:
    """The same step of every policy, side by side on one time axis (shared, from zero)."""
    if not timelines:
        return None
    n = len(timelines)
    rows = max(tl.num_replicas for tl in timelines.values())
    fig, axes = plt.subplots(
        1, n, figsize=(min(7.0 * n, 16.0), 0.42 * rows + 1.9), sharex=True, squeeze=False
    )
    for ax, (pol, tl) in zip(axes[0], timelines.items(), strict=True):
        spread = " (groups spread over replicas)" if any(b.replicas for b in tl.bars) else ""
        _draw_timeline(ax, tl, f"{pol}: step {tl.step}, q={tl.q}, m={tl.m}{spread}")
    return save(fig, path, dpi=110)


def length_distributions(run: RunData, path: Path) -> Path | None:
    if not run.lengths:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for pol, lens in run.lengths.items():
        xs = np.sort(np.asarray(lens))
        if xs.size:
            ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=f"{pol} (n={xs.size})")
    finish(ax, "response tokens", "CDF", "Delivered response-length distribution")
    return save(fig, path, dpi=110)


def capture_rates(run: RunData, path: Path) -> Path | None:
    cap = run.capture
    if "rho" not in cap:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, v in cap.items():
        if k != "rho" and "capture" in k and len(v) == len(cap["rho"]):
            ax.plot([100 * r for r in cap["rho"]], [100 * x for x in v], marker="o", label=k)
    ax.set_ylim(0, 105)
    finish(ax, "cutoff rho (%)", "long-tail groups captured (%)", "Partial-rollout capture rate")
    return save(fig, path, dpi=110)

