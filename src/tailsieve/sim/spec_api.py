"""``simulate_spec(...)``: the Python face of ``tailsieve simulate --spec``.

::

    from tailsieve.sim.spec_api import simulate_spec
    res = simulate_spec("paper-math", spec="seer", seeds=2, steps=12)
    res.speedups["tailsieve"]          # mean paired speedup over the honest baseline
    res.colocation                      # the dealing TailSieve chose per seed, and why
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import get_acceptance
from tailsieve.model.profiles import DEFAULT_PROFILE, load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids
from tailsieve.sim.spec_runs import BASELINE, SPEC_VARIANTS, run_spec_variants
from tailsieve.sim.speedup_stats import seed_speedup, t_interval
from tailsieve.sim.workloads import resolve_workload


@dataclass(frozen=True, slots=True)
class SpecSimulationResult:
    """Paired speedups over the honest baseline (``uniform-requests`` with the same engine
    speculation and the same batch-size gate on every replica), per variant, over seeds."""

    settings: dict[str, Any]
    speedups: dict[str, float]  # variant -> mean over seeds
    intervals: dict[str, tuple[float | None, float | None]]  # 95% t-interval over seeds
    per_seed: dict[str, list[float]]
    colocation: list[dict[str, Any]]  # per seed: dealing, k, reason, offsite fraction

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "baseline": BASELINE,
                "speedups": self.speedups,
                "intervals": {k: list(v) for k, v in self.intervals.items()},
                "per_seed": self.per_seed, "colocation": self.colocation}


def simulate_spec(
    workload: str = "paper-math", *, spec: str = "seer", spec_price: float = 1.0,
    colocate: str = "auto", replicas: int = 8, groups: int = 64, group_size: int = 8,
    steps: int = 20, profile: str = DEFAULT_PROFILE, seed: int = 0, seeds: int = 1,
    tail_strength: str | None = None, price_drafts: bool = True,
) -> SpecSimulationResult:
    """Simulate the speculation variants (``sim.spec_runs.SPEC_VARIANTS``) with acceptance
    preset ``spec`` (``tailsieve.model.acceptance``), its extra cost times ``spec_price``.
    Simulated only: no live code places speculation."""
    if seeds < 1:
        raise ConfigError(f"seeds must be >= 1, got {seeds}")
    curve = get_acceptance(spec)
    base = ReplicaConfig.from_profile(load_profile(profile))
    per_seed: dict[str, list[float]] = {}
    coloc: list[dict[str, Any]] = []
    for sd in range(seed, seed + seeds):
        wl = resolve_workload(workload, tail_strength, seed=sd)
        ds = wl.prompt_ids()
        settings = SimSettings(num_replicas=replicas, num_groups=groups,
                               group_size=group_size, num_steps=steps, seed=sd)
        res = run_spec_variants(settings, partial(epoch_prompt_ids, ds, sd), wl, base, curve,
                                spec_price, SPEC_VARIANTS, colocate, price_drafts)
        ref = res.runs[BASELINE].run
        for name, run in res.runs.items():
            per_seed.setdefault(name, []).append(seed_speedup(ref, run.run))
        coloc.append({"seed": sd, "dealing": res.colocation.dealing, "k": res.colocation.k,
                      "reason": res.colocation.reason,
                      "offsite_fraction": res.offsite_fraction})
    speedups, intervals = {}, {}
    for name, vals in per_seed.items():
        mean, lo, hi = t_interval(vals)
        speedups[name] = mean
        intervals[name] = (lo, hi)
    meta = {"workload": workload, "spec": spec, "spec_price": spec_price,
            "colocate": colocate, "replicas": replicas, "groups": groups,
            "group_size": group_size, "steps": steps, "profile": profile, "seed": seed,
            "seeds": seeds, "price_drafts": price_drafts, "acceptance": curve.to_dict()}
    return SpecSimulationResult(meta, speedups, intervals, per_seed, coloc)
