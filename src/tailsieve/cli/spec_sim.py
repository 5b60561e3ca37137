"""``tailsieve simulate --spec PRESET``: speculation placed by the router, over the honest
baseline (``sim.spec_api``; simulated only, no live code places speculation)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tailsieve.core.training_step import DEFAULT_ROLLOUT_SHARE, step_speedup
from tailsieve.sim.spec_api import BASELINE, simulate_spec

_DESCRIBE = {
    "uniform-requests": "the honest baseline: round-robin requests, speculation on every "
                        "replica where it pays (the same batch-size gate as tailsieve)",
    "uniform-requests-nospec": "round-robin requests, no speculation",
    "uniform-requests-ungated": "round-robin requests, speculation at every batch",
    "uniform-spec": "whole groups round-robin, speculation where it pays",
    "tailsieve": "moves + speculation where it pays + the dealing chosen",
    "tailsieve-spread": "moves + speculation where it pays, groups spread",
    "tailsieve-grouped": "moves + speculation where it pays, groups whole",
    "seer-oracle": "knows every length, speculation where it pays",
}


def run_spec_cli(workload: str, spec: str, spec_price: float, colocate: str, replicas: int,
                 groups: int, group_size: int, steps: int, profile: str, seed: int,
                 seeds: int, tail_strength: str | None, as_json: bool,
                 out: Path | None, rollout_share: float = DEFAULT_ROLLOUT_SHARE) -> None:
    """Run ``simulate_spec`` and print a table (or JSON); ``out``: write spec.json there. Each
    speedup is printed with the training step's at ``rollout_share`` of the step."""
    res = simulate_spec(workload, spec=spec, spec_price=spec_price, colocate=colocate,
                        replicas=replicas, groups=groups, group_size=group_size, steps=steps,
                        profile=profile, seed=seed, seeds=seeds, tail_strength=tail_strength)
    data = res.to_dict()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "spec.json").write_text(json.dumps(data, indent=1) + "\n")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table(title=f"Speculation ({spec}, price x{spec_price:g}) on {workload}, "
                        f"R={replicas}, N={groups}x{group_size}, profile {profile}, "
                        f"{seeds} seed(s); paired over {BASELINE} with the same speculation "
                        "and gate (simulated)",
                  caption=f"step = the training step's speedup where the rollout is "
                          f"{rollout_share:.2f} of the step (--rollout-share)",
                  caption_justify="left")
    for col in ("variant", "speedup", "95% interval", "step", "what it is"):
        table.add_column(col)
    for name, mean in res.speedups.items():
        lo, hi = res.intervals[name]
        ci = "-" if lo is None or hi is None else f"{lo:.3f}-{hi:.3f}"
        table.add_row(name, f"{mean:.3f}x", ci, f"{step_speedup(mean, rollout_share):.3f}x",
                      _DESCRIBE.get(name, ""))
    console = Console(width=160)
    console.print(table)
    for c in res.colocation:
        console.print(f"seed {c['seed']}: dealing {c['dealing']} (k = {c['k']}): {c['reason']}"
                      f"; tokens decoded off the group's server {100 * c['offsite_fraction']:.1f}%",
                      highlight=False)
