"""Paired comparison of agentic policies: every policy of a seed runs the same trajectories,
and step ``t`` of a policy is compared with step ``t`` of verl's default.

Per seed, the speedup of a policy is the mean over the measured steps of
``T_verl(t) / T_policy(t)``; over seeds, the mean with a 95% Student-t interval
(``sim.speedup_stats.t_interval``). Steps before ``warmup_steps`` run only for policies that
carry state across steps (TailSieve's balance gate and step-time estimate); they are not
measured. Every step starts with empty prefix caches (new weights invalidate them).

Beside the policies, ``ceiling`` pairs verl's default with the step's lower bound
(``sim.agentic.bound``): per seed the mean over the measured steps of
``T_verl(t) / bound(t)``, a speedup over verl's default that no router can exceed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.sim.agentic.bound import StepBound, step_lower_bound
from tailsieve.sim.agentic.policies import BASELINE, policy_spec
from tailsieve.sim.agentic.run import RunOptions, simulate_policy
from tailsieve.sim.agentic.stats import StepStats
from tailsieve.sim.speedup_stats import t_interval
from tailsieve.workload.agentic_presets import agentic_preset
from tailsieve.workload.turns import Trajectory

__all__ = ["AgenticSetup", "CeilingResult", "PolicyResult", "ceiling", "check_slowdowns",
           "compare_policies", "replica_configs", "setup_steps"]


@dataclass(frozen=True, slots=True)
class AgenticSetup:
    """One cell of the agentic grid: a preset on R replicas of a profile."""

    preset: str
    replicas: int
    profile: str = "qwen3-4b-h100"
    num_groups: int = 64
    group_size: int = 8
    warmup_steps: int = 2  # unmeasured steps for policies with cross-step state
    measured_steps: int = 2
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    options: RunOptions = field(default_factory=RunOptions)
    slowdowns: tuple[float, ...] = ()  # replica r runs slowdowns[r] times slower (a
    # straggler; replicas beyond the tuple at 1)

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.num_groups < 1 or self.group_size < 1:
            raise ConfigError("replicas, num_groups and group_size must be >= 1")
        check_slowdowns(self.slowdowns, self.replicas)
        if self.warmup_steps < 0 or self.measured_steps < 1 or not self.seeds:
            raise ConfigError("need warmup_steps >= 0, measured_steps >= 1 and a seed")


@dataclass(slots=True)
class PolicyResult:
    """One policy over the seeds of a cell."""

    policy: str
    per_seed_speedup: list[float]  # mean over measured steps of T_verl / T_policy
    step_s: list[float]  # every measured step's time, all seeds
    stats: list[StepStats]  # every measured step, all seeds

    def speedup(self) -> tuple[float, float | None, float | None]:
        return t_interval(self.per_seed_speedup)

    def summary(self) -> dict[str, Any]:
        mean, lo, hi = self.speedup()
        n = len(self.stats)
        return {
            "policy": self.policy, "speedup": mean, "ci_low": lo, "ci_high": hi,
            "per_seed": self.per_seed_speedup, "step_s": float(np.mean(self.step_s)),
            "hit_rate": float(np.mean([s.hit_rate for s in self.stats])),
            "reprefilled_tokens_per_step": sum(s.reprefilled_tokens for s in self.stats) / n,
            "boundary_moves_per_step": sum(s.boundary_moves for s in self.stats) / n,
            "midturn_moves_per_step": sum(s.midturn_moves for s in self.stats) / n,
            "moves_on_share": sum(s.moves_on for s in self.stats) / n,
            "preemptions_per_step": sum(s.preemptions for s in self.stats) / n,
        }


@dataclass(slots=True)
class CeilingResult:
    """The step's lower bound against verl's default over the seeds of a cell."""

    per_seed_ceiling: list[float]  # mean over measured steps of T_verl / bound
    bounds: list[StepBound]  # every measured step's bound, all seeds

    def summary(self) -> dict[str, Any]:
        mean, lo, hi = t_interval(self.per_seed_ceiling)
        b = self.bounds
        return {
            "speedup": mean, "ci_low": lo, "ci_high": hi, "per_seed": self.per_seed_ceiling,
            "step_s": float(np.mean([x.bound_s for x in b])),
            "critical_path_s": float(np.mean([x.critical_path_s for x in b])),
            "work_s": float(np.mean([x.work_s for x in b])),
            "critical_path_binds": sum(x.bound_s == x.critical_path_s for x in b) / len(b),
        }


def replica_configs(profile: str, replicas: int,
                    slowdowns: Sequence[float] = ()) -> list[ReplicaConfig]:
    """``replicas`` replicas of ``profile`` whose first prefills cost the profile's grounded
    prefill model; replica ``r`` ``slowdowns[r]`` times slower at everything
    (``ReplicaConfig.scaled``, as the emulator's ``--slowdown``), those beyond at 1."""
    check_slowdowns(slowdowns, replicas)
    cfg = ReplicaConfig.from_profile(load_profile(profile), prefill_s_per_token="profile")
    return [cfg.scaled(slowdowns[r]) if r < len(slowdowns) else cfg for r in range(replicas)]


def check_slowdowns(slowdowns: Sequence[float], replicas: int) -> None:
    """A clear error for slowdowns that are not finite and > 0, or more than replicas."""
    if len(slowdowns) > replicas:
        raise ConfigError(f"{len(slowdowns)} slowdowns for {replicas} replicas")
    if not all(math.isfinite(f) and f > 0 for f in slowdowns):
        raise ConfigError(f"slowdowns must be finite numbers > 0, got {list(slowdowns)}")


def setup_steps(setup: AgenticSetup, seed: int) -> list[list[Trajectory]]:
    """The trajectories of every step (warm-up first) of ``seed``, groups in order."""
    num = setup.warmup_steps + setup.measured_steps
    trace = agentic_preset(setup.preset).generate(setup.num_groups, setup.group_size, num,
                                                  np.random.default_rng([seed, 33]))
    return [[t for g in trace.groups(s) for t in g] for s in trace.steps()]


def compare_policies(setup: AgenticSetup, policies: Sequence[str]) -> dict[str, PolicyResult]:
    """Every policy of ``policies`` (verl's default added first if missing) on ``setup``,
    paired per seed and step."""
    names = [BASELINE, *[p for p in policies if p != BASELINE]]
    specs = [policy_spec(p) for p in names]
    configs = replica_configs(setup.profile, setup.replicas, setup.slowdowns)
    out = {p: PolicyResult(p, [], [], []) for p in names}
    for seed in setup.seeds:
        steps = setup_steps(setup, seed)
        runs = {s.name: simulate_policy(steps, configs, s, seed, setup.options,
                                        setup.warmup_steps)[setup.warmup_steps:]
                for s in specs}
        base = [st.step_s for st in runs[BASELINE] if st is not None]
        for name, stats in runs.items():
            got = [st for st in stats if st is not None]
            res = out[name]
            res.per_seed_speedup.append(float(np.mean(
                [b / s.step_s for b, s in zip(base, got, strict=True)])))
            res.step_s.extend(s.step_s for s in got)
            res.stats.extend(got)
    return out


def ceiling(setup: AgenticSetup, verl: PolicyResult) -> CeilingResult:
    """verl's default (``compare_policies``' first result) against the lower bound of every
    measured step, paired per seed and step."""
    configs = replica_configs(setup.profile, setup.replicas)
    n = setup.measured_steps
    if len(verl.step_s) != n * len(setup.seeds):
        raise ConfigError("verl's result must hold every measured step of every seed")
    out = CeilingResult([], [])
    for k, seed in enumerate(setup.seeds):
        steps = setup_steps(setup, seed)[setup.warmup_steps:]
        bounds = [step_lower_bound(t, configs) for t in steps]
        verl_s = verl.step_s[k * n:(k + 1) * n]
        out.per_seed_ceiling.append(float(np.mean(
            [v / b.bound_s for v, b in zip(verl_s, bounds, strict=True)])))
        out.bounds.extend(bounds)
    return out
