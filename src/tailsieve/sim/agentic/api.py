"""The library entry point of the agentic simulator (``tailsieve agentic simulate``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailsieve.sim.agentic.compare import AgenticSetup, ceiling, compare_policies
from tailsieve.sim.agentic.policies import BASELINE, DEFAULT_POLICIES
from tailsieve.sim.agentic.report import ROUTING_BOUND_GAIN, best_other, gap_share

__all__ = ["simulate_agentic"]


def simulate_agentic(preset: str, replicas: int, policies: Sequence[str] = DEFAULT_POLICIES,
                     seeds: int = 5, profile: str = "qwen3-4b-h100", groups: int = 64,
                     group_size: int = 8, warmup_steps: int = 2,
                     measured_steps: int = 2,
                     slowdowns: Sequence[float] = (), first_seed: int = 0) -> dict[str, Any]:
    """Compare ``policies`` on ``preset`` (``workload.agentic_presets``) with ``replicas``
    replicas of ``profile``, paired over ``seeds`` seeds: a JSON-ready dict with each
    policy's summary (speedup over verl's default with its 95% interval, step time, prefix-
    cache hit rate, re-prefilled tokens and moves per step), the step's lower bound as a
    speedup over verl's default that no router passes (``bound``), the best other router,
    the share of the gap between verl's step and the bound that TailSieve and the best other
    router close, and whether the workload is routing-bound (the bound gains more than
    ``ROUTING_BOUND_GAIN`` over verl's default). ``slowdowns[r]``: replica ``r`` runs that
    many times slower (a straggler; ``AgenticSetup.slowdowns``); the seeds are
    ``first_seed .. first_seed + seeds - 1``."""
    setup = AgenticSetup(preset, replicas, profile, groups, group_size, warmup_steps,
                         measured_steps, tuple(range(first_seed, first_seed + seeds)),
                         slowdowns=tuple(slowdowns))
    results = compare_policies(setup, policies)
    rows = {p: r.summary() for p, r in results.items()}
    bound = ceiling(setup, results[BASELINE]).summary()
    best = best_other(rows)
    ts = rows.get("tailsieve", {}).get("speedup")
    return {
        "preset": preset, "replicas": replicas, "profile": profile, "num_groups": groups,
        "group_size": group_size, "seeds": seeds, "first_seed": first_seed, "warmup_steps": warmup_steps,
        "measured_steps": measured_steps, "slowdowns": list(slowdowns), "policies": rows,
        "bound": bound,
        "best_other": best,
        "tailsieve_gap_share": gap_share(ts, bound["speedup"]),
        "best_other_gap_share": gap_share(rows[best]["speedup"], bound["speedup"])
        if best else None,
        "routing_bound": bound["speedup"] - 1.0 > ROUTING_BOUND_GAIN,
    }
