"""Shared pieces of the grounded-profile suite: profiles, multi-seed paired runs, rows.

Every number is a paired statistic (``tailsieve.sim.speedup_stats``): per seed, the mean over
the steady steps (``t >= STEADY_FROM``, flush excluded) of ``T_uniform(t) / T_policy(t)`` on the
same prompts and lengths; over seeds, the mean with a 95% Student-t interval. The paper's
column (last three regular steps) is kept beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from paper.common import (
    Timer,
    fixed_factory,
    machine_info,
    savefig,
    simulate,
    write_json,
)

from tailsieve.errors import ProfileError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.sim.driver import ControllerFactory, SimSettings, default_controller
from tailsieve.sim.records import PolicyRun
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import CI_METHOD, STEADY_FROM, speedup_stat
from tailsieve.sim.workloads import resolve_workload

__all__ = [
    "CI_METHOD", "STEADY_FROM", "Timer", "fixed_factory", "machine_info", "savefig",
    "write_json",
]

PROFILE_4B = "qwen3-4b-h100"
PROFILE_30B = "qwen3-30b-a3b-h100-tp2"
PROFILE_35_4B = "qwen3.5-4b-h100"
# issue 11's stand-in until the derived profiles exist: 5.0 ms + 20 us * b + 55 ns * C
HAND = "hand-5ms-20us-55ns"


def hand_profile() -> ThroughputModel:
    pairs = [(b, 5.0e-3 + 20e-6 * b) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)]
    return ThroughputModel.from_pairs(pairs, name=HAND, source="issue 11 hand profile") \
        .with_context(55e-9)


def profile(name: str) -> tuple[ThroughputModel, str]:
    """(model, the name actually used): the hand profile when ``name`` is not shipped yet."""
    if name == HAND:
        return hand_profile(), HAND
    try:
        return load_profile(name), name
    except ProfileError:
        return hand_profile(), HAND


def pools_for(name: str, tail_spec: str = "none", bulk_spec: str = "none"
              ) -> tuple[PoolConfigs, str]:
    model, used = profile(name)
    pools = PoolConfigs.from_specs(ReplicaConfig(model), SpecConfig.parse(tail_spec),
                                   SpecConfig.parse(bulk_spec))
    return pools, used


def workload(spec: str, seed: int, num_prompts: int) -> Any:
    """``NAME`` or ``NAME/STRENGTH`` (weak | strong: the A.5 tail transform)."""
    name, _, strength = spec.partition("/")
    return resolve_workload(name, strength or None, seed=seed, num_prompts=num_prompts)


def run_seeds(
    policies: Sequence[str],
    seeds: Sequence[int],
    wl_spec: str,
    pools: PoolConfigs,
    replicas: int,
    groups: int,
    steps: int,
    group_size: int = 8,
    factory: ControllerFactory = default_controller,
    pools_by_policy: dict[str, PoolConfigs] | None = None,
    **settings: Any,
) -> list[dict[str, PolicyRun]]:
    """One ``{policy: run}`` per seed, every policy on that seed's prompts and lengths."""
    out = []
    for seed in seeds:
        wl = workload(wl_spec, seed, max(1000, int(1.5 * (steps + 2) * groups)))
        s = SimSettings(num_replicas=replicas, num_groups=groups, group_size=group_size,
                        num_steps=steps, seed=seed, **settings)
        paired = simulate(policies, s, wl, pools, factory, pools_by_policy)
        out.append({p: paired.run(p) for p in policies})
    return out


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def policy_row(policy: str, seeds: list[dict[str, PolicyRun]],
               reference: str = "uniform") -> dict[str, Any]:
    """Paired statistic, paper column, wasted tokens and diagnostics of one policy."""
    st = speedup_stat(policy, seeds, STEADY_FROM, reference)
    runs = [s[policy] for s in seeds]
    diags = [r.diagnostics_summary(STEADY_FROM) for r in runs]
    return {
        "policy": policy,
        "paired": st.to_dict(),
        "paired_label": st.label(),
        "last3": st.last3_mean,
        "last3_ci": [st.last3_ci_low, st.last3_ci_high],
        "wasted_token_fraction": float(np.mean([r.wasted_token_fraction for r in runs])),
        "final_qm": [(r.q_trajectory[-1], r.m_trajectory[-1]) for r in runs],
        "capture_rate": _mean([d["capture_rate"] for d in diags]),
        "tail_idle_fraction": _mean([d["tail_idle_fraction"] for d in diags]),
        "aborted_replica_fraction": _mean([d["aborted_replica_fraction"] for d in diags]),
        "makespan_obs_over_pred": _mean([d["makespan_obs_over_pred"] for d in diags]),
        "steady_step_s": float(np.mean([
            np.mean([r.makespan_s for r in run.regular if r.step >= STEADY_FROM])
            for run in runs])),
        "fluid_bound_ratio": _mean([_fluid_ratio(run) for run in runs]),
    }


def _fluid_ratio(run: PolicyRun) -> float | None:
    """Steady step time over the fluid perfect-balance bound of the same batches
    (``oracle.fluid_bound``: no placement, free moves included, is faster), summed."""
    steady = [r for r in run.regular if r.step >= STEADY_FROM and r.fluid_bound_s > 0]
    bound = sum(r.fluid_bound_s for r in steady)
    return sum(r.makespan_s for r in steady) / bound if bound > 0 else None


def fmt_x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}x"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def fmt_ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"


def table_lines(rows: list[dict[str, Any]], label: str = "policy") -> list[str]:
    """Markdown table of ``policy_row`` rows."""
    out = [f"| {label} | paired steady speedup [95% CI] | last 3 steps | step / fluid bound "
           "| tokens wasted | capture | final (q, m) per seed |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        qm = " ".join(f"({q},{m})" for q, m in r["final_qm"])
        out.append(
            f"| {r.get('label', r['policy'])} | {r['paired_label']} | {fmt_x(r['last3'])} | "
            f"{fmt_x(r.get('fluid_bound_ratio'))} | {fmt_pct(r['wasted_token_fraction'])} | "
            f"{fmt_pct(r['capture_rate'])} | {qm} |")
    return out


def seeds_for(quick: bool, seeds: Sequence[int] | None = None) -> tuple[int, ...]:
    if seeds is not None:
        return tuple(seeds)
    return (0, 1) if quick else (0, 1, 2, 3, 4)


def steps_for(quick: bool, steps: int | None = None) -> int:
    if steps is not None:
        return steps
    return 12 if quick else 20


def header(r: dict[str, Any]) -> list[str]:
    m = r.get("machine", {})
    s = r.get("settings", {})
    return [
        f"Profile `{s.get('profile_used', '?')}`, {len(s.get('seeds', []))} seeds "
        f"{s.get('seeds')}, {s.get('steps')} steps (steady: steps >= {STEADY_FROM}); "
        f"{'quick' if r.get('quick') else 'full'} configuration, {r.get('runtime_s', 0):.0f} s, "
        f"measured {m.get('date_utc', '?')}.",
        "",
    ]
