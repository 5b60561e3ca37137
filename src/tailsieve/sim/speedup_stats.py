"""Robust paired speedup over Uniform: per-step ratios on the same prompts, over seeds.

Definition (used by the benchmarks, ``tailsieve simulate`` and the report; ``docs/diagnostics.md``):

- Every policy of one seed runs the same prompt stream with the same lengths (the simulator's
  ``PairedLengths``), so regular step ``t`` of Uniform and of a policy are paired.
- Steady steps: regular steps with index ``t >= steady_from`` (default ``STEADY_FROM``): step 0
  is the protocol's warm-up and the controller gets ``STEADY_FROM - 1`` more steps to settle,
  the same for every policy. The flush step (TailSieve only) is excluded.
- Per seed: ``s = mean over steady t of T_uniform(t) / T_policy(t)``.
- Over seeds: the mean of the seed values with a 95% Student-t interval
  ``mean +- t_{0.975, S-1} * sd / sqrt(S)`` (no interval with one seed).
- The paper's column: per seed ``mean(T_uniform over the last 3 regular steps) / mean(T_policy
  over the same steps)``, averaged over seeds with the same t-interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.sim.records import PolicyRun
from tailsieve.sim.steady import STEADY_FROM, STEADY_STEPS, ratios_by_step

__all__ = [
    "CI_METHOD", "STEADY_FROM", "STEADY_STEPS", "SpeedupStat", "last_steps_speedup",
    "paired_step_ratios", "ratios_by_step", "seed_speedup", "speedup_stat", "speedup_table",
    "t_interval", "t_quantile_975",
]

CI_METHOD = "95% Student-t interval over per-seed means"

# two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t_quantile_975(df: int) -> float:
    """``t_{0.975, df}`` (the normal 1.960 beyond 30 degrees of freedom is within 2%)."""
    if df < 1:
        raise ConfigError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def t_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """(mean, low, high) of the 95% Student-t interval; bounds None for fewer than 2 values."""
    if not values:
        raise ConfigError("t_interval needs at least one value")
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    if x.size < 2:
        return mean, None, None
    half = t_quantile_975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def paired_step_ratios(
    uniform: PolicyRun, policy: PolicyRun, steady_from: int = STEADY_FROM
) -> dict[int, float]:
    """``T_uniform(t) / T_policy(t)`` for every steady regular step both runs have."""
    return ratios_by_step(uniform.step_times(), policy.step_times(), steady_from)


def seed_speedup(uniform: PolicyRun, policy: PolicyRun, steady_from: int = STEADY_FROM) -> float:
    """Mean paired per-step ratio over the steady steps of one seed."""
    ratios = paired_step_ratios(uniform, policy, steady_from)
    if not ratios:
        raise ConfigError(
            f"no steady steps (step >= {steady_from}) for {policy.policy}: run more steps"
        )
    return float(np.mean(list(ratios.values())))


def last_steps_speedup(uniform: PolicyRun, policy: PolicyRun, k: int = STEADY_STEPS) -> float:
    """The paper's column: mean Uniform step time over the last ``k`` regular steps divided by
    the policy's over its last ``k``."""
    u = [r.makespan_s for r in uniform.regular[-k:]]
    p = [r.makespan_s for r in policy.regular[-k:]]
    if not u or not p or sum(p) <= 0:
        raise ConfigError(f"no regular steps to compare for {policy.policy}")
    return float(np.mean(u) / np.mean(p))


@dataclass(frozen=True, slots=True)
class SpeedupStat:
    """A policy's paired speedup over Uniform across seeds."""

    policy: str
    mean: float  # mean over seeds of the per-seed steady speedup
    ci_low: float | None  # 95% t-interval (None with one seed)
    ci_high: float | None
    per_seed: tuple[float, ...]
    last3_mean: float  # the paper's "last three steps" column, mean over seeds
    last3_ci_low: float | None
    last3_ci_high: float | None
    num_seeds: int
    steady_from: int  # first steady step index
    num_steady_steps: int  # steady steps per seed (the smallest over seeds)
    method: str = CI_METHOD

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_seed"] = list(self.per_seed)
        return d

    def label(self) -> str:
        """``1.234x [1.200, 1.268]`` (the interval omitted with one seed)."""
        if self.ci_low is None or self.ci_high is None:
            return f"{self.mean:.3f}x"
        return f"{self.mean:.3f}x [{self.ci_low:.3f}, {self.ci_high:.3f}]"


def speedup_stat(
    policy: str,
    seeds: Sequence[Mapping[str, PolicyRun]],
    steady_from: int = STEADY_FROM,
    reference: str = "uniform",
) -> SpeedupStat:
    """The paired statistic of ``policy`` from one ``{policy: run}`` mapping per seed (each
    holding ``reference`` run on the same prompts)."""
    if not seeds:
        raise ConfigError("speedup_stat needs at least one seed")
    per_seed, last3, steady_counts = [], [], []
    for runs in seeds:
        if reference not in runs or policy not in runs:
            raise ConfigError(f"a seed lacks the {reference!r} or {policy!r} run")
        uni, pol = runs[reference], runs[policy]
        per_seed.append(seed_speedup(uni, pol, steady_from))
        steady_counts.append(len(paired_step_ratios(uni, pol, steady_from)))
        last3.append(last_steps_speedup(uni, pol))
    mean, lo, hi = t_interval(per_seed)
    l3, l3lo, l3hi = t_interval(last3)
    return SpeedupStat(
        policy=policy, mean=mean, ci_low=lo, ci_high=hi, per_seed=tuple(per_seed),
        last3_mean=l3, last3_ci_low=l3lo, last3_ci_high=l3hi, num_seeds=len(seeds),
        steady_from=steady_from, num_steady_steps=min(steady_counts),
    )


def speedup_table(
    seeds: Sequence[Mapping[str, PolicyRun]], steady_from: int = STEADY_FROM,
    reference: str = "uniform",
) -> dict[str, SpeedupStat]:
    """``speedup_stat`` of every policy present in the first seed, in its order."""
    if not seeds:
        raise ConfigError("speedup_table needs at least one seed")
    return {
        name: speedup_stat(name, seeds, steady_from, reference) for name in seeds[0]
    }
