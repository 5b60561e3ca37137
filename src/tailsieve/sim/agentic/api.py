"""The library entry point of the agentic simulator (``tailsieve agentic simulate``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailsieve.sim.agentic.compare import AgenticSetup, compare_policies
from tailsieve.sim.agentic.policies import DEFAULT_POLICIES
from tailsieve.sim.agentic.report import best_other, oracle_share

__all__ = ["simulate_agentic"]


def simulate_agentic(preset: str, replicas: int, policies: Sequence[str] = DEFAULT_POLICIES,
                     seeds: int = 5, profile: str = "qwen3-4b-h100", groups: int = 64,
                     group_size: int = 8, warmup_steps: int = 2,
                     measured_steps: int = 2,
                     slowdowns: Sequence[float] = ()) -> dict[str, Any]:
    """Compare ``policies`` on ``preset`` (``workload.agentic_presets``) with ``replicas``
    replicas of ``profile``, paired over ``seeds`` seeds: a JSON-ready dict with each
    policy's summary (speedup over verl's default with its 95% interval, step time, prefix-
    cache hit rate, re-prefilled tokens and moves per step), the best other router and
    TailSieve's share of the oracle's gain. ``slowdowns[r]``: replica ``r`` runs that many
    times slower (a straggler; ``AgenticSetup.slowdowns``)."""
    setup = AgenticSetup(preset, replicas, profile, groups, group_size, warmup_steps,
                         measured_steps, tuple(range(seeds)), slowdowns=tuple(slowdowns))
    rows = {p: r.summary() for p, r in compare_policies(setup, policies).items()}
    return {
        "preset": preset, "replicas": replicas, "profile": profile, "num_groups": groups,
        "group_size": group_size, "seeds": seeds, "warmup_steps": warmup_steps,
        "measured_steps": measured_steps, "slowdowns": list(slowdowns), "policies": rows,
        "best_other": best_other(rows),
        "tailsieve_oracle_share": oracle_share(rows),
    }
