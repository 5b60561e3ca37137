"""PNG plots of a simulated run (matplotlib, Agg backend; no display needed)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tailsieve.core.pool import Pool
from tailsieve.sim.executor import SimStepResult
from tailsieve.sim.records import PolicyRun


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_step_times(runs: Mapping[str, PolicyRun], path: Path) -> Path:
    """Step time of every policy over the regular steps."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, run in runs.items():
        rs = run.regular
        ax.plot([r.step for r in rs], [r.makespan_s for r in rs], marker="o", ms=3, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s)")
    ax.set_title("Simulated rollout step time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_controller(runs: Mapping[str, PolicyRun], path: Path) -> Path:
    """q (tail groups) and m (tail replicas) over steps for every policy that sets them."""
    plt = _pyplot()
    fig, (ax_q, ax_m) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for name, run in runs.items():
        rs = run.regular
        if not any(r.q or r.m for r in rs):
            continue
        steps = [r.step for r in rs]
        ax_q.step(steps, [r.q for r in rs], where="post", label=name)
        ax_m.step(steps, [r.m for r in rs], where="post", label=name)
    ax_q.set_ylabel("q (tail groups)")
    ax_m.set_ylabel("m (tail replicas)")
    ax_m.set_xlabel("step")
    for ax in (ax_q, ax_m):
        ax.grid(alpha=0.3)
    ax_q.legend(fontsize=8)
    ax_q.set_title("Controller trajectory")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_timeline(result: SimStepResult, num_replicas: int, title: str, path: Path) -> Path:
    """One step, one row per replica: a bar per group ending at its completion (or abort),
    tail groups orange, delivered bulk blue, aborted grey; the dashed line is the cutoff."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.5 * num_replicas + 1.5))
    for span in result.spans:
        if span.pool is Pool.TAIL:
            color = "tab:orange"
        elif span.delivered:
            color = "tab:blue"
        else:
            color = "0.7"
        ax.barh(span.replica, span.end_s, height=0.6, color=color, alpha=0.25,
                edgecolor=color, linewidth=0.8)
    ax.axvline(result.cutoff_s, color="k", ls="--", lw=1, label="cutoff")
    out = result.outcome
    if out.tail_time_s > 0:
        ax.axvline(out.tail_time_s, color="tab:orange", ls=":", lw=1, label="tail done")
    ax.set_yticks(range(num_replicas))
    ax.set_ylabel("replica")
    ax.set_xlabel("seconds from step start")
    ax.set_title(f"{title}: step {out.step}, makespan {out.makespan_s:.1f} s")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
