"""Partial-rollout capture rate (paper section 2.3, Figure 3).

One round: launch ``G = N + round(rho N)`` groups of ``n`` responses (lengths from a workload
at step ``a``) across ``R`` replicas round-robin (group ``g`` on replica ``g mod R``); every
replica runs all its responses under the all-admit decode model
(``all_admit_completion_times``); a group completes when its last response does. At the cutoff
-- the moment the ``N``-th group completes -- the ``G - N`` unfinished groups are the
*candidates*.

Ground truth: the long-tail groups are the ``k`` launched groups with the largest group length
(``tail_metric``: the longest response ``max``, or the ``total`` tokens), ``k = G - N`` by
default (so capture equals both precision and recall) or ``ceil(tail_fraction * G)``. Groups
tied with the ``k``-th largest size all count as long-tail and capture is
``|candidates & tail| / min(|tail|, k)`` -- with ``max`` many groups tie at the length cap.

* same-round capture: fraction of this round's long-tail groups that are candidates;
* cross-step capture: the same prompts are regenerated at step ``b`` (the next checkpoint, or
  an independent half of a single-checkpoint trace) and the fraction of *those* long-tail
  groups that were candidates in the round at step ``a`` -- the signal TailSieve uses.

Rates are averaged over ``rounds`` seeded rounds; all ``rho`` share a round's draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.replica_time import all_admit_completion_times
from tailsieve.model.throughput import ThroughputModel
from tailsieve.workload.workload_model import Workload

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """Settings of a capture-rate experiment."""

    rhos: tuple[float, ...] = (0.05, 0.10, 0.25)
    groups: int = 64  # N: groups the step needs
    group_size: int = 8  # n: responses per group
    replicas: int = 8  # R
    rounds: int = 200
    seed: int = 0
    tail_metric: str = "max"  # "max" or "total"
    tail_fraction: float | None = None  # None: k = number of candidates
    step_pairs: tuple[tuple[int, int], ...] = ((0, 1),)  # (a, b) per round, cycled

    def __post_init__(self) -> None:
        if not self.rhos or any(not 0 < r <= 4 for r in self.rhos):
            raise ConfigError(f"rho values must be in (0, 4], got {self.rhos}")
        for name in ("groups", "group_size", "replicas", "rounds"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.tail_metric not in ("max", "total"):
            raise ConfigError(f"tail_metric must be 'max' or 'total', got {self.tail_metric!r}")
        if self.tail_fraction is not None and not 0 < self.tail_fraction < 1:
            raise ConfigError(f"tail_fraction must be in (0, 1), got {self.tail_fraction}")
        if not self.step_pairs:
            raise ConfigError("step_pairs must not be empty")


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """Mean rates over rounds for one ``rho``."""

    rho: float
    launched_groups: int
    candidates: int
    tail_groups: int
    same_round_capture: float
    cross_step_capture: float
    same_round_top1: float  # fraction of rounds whose single longest group was a candidate
    cross_step_top1: float
    random_baseline: float  # expected capture of a random candidate set (candidates / launched)

    def to_dict(self) -> dict[str, float | int]:
        """Plain dict (JSON-friendly)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def group_completion_times_s(
    lengths: npt.NDArray[np.int64], replicas: int, model: ThroughputModel
) -> FloatArray:
    """Completion time of each group (rows of ``lengths``) under round-robin placement."""
    g, n = lengths.shape
    out = np.empty(g)
    for r in range(replicas):
        idx = np.arange(r, g, replicas)
        if idx.size == 0:
            continue
        times = all_admit_completion_times(lengths[idx].ravel(), model).reshape(idx.size, n)
        out[idx] = times.max(axis=1)
    return out


def candidates_at_cutoff(completion_s: FloatArray, needed: int) -> npt.NDArray[np.bool_]:
    """True for groups still running when the ``needed``-th group completes."""
    order = np.argsort(completion_s, kind="stable")
    out = np.zeros(completion_s.size, dtype=bool)
    out[order[needed:]] = True
    return out


def _tail_capture(cand: npt.NDArray[np.bool_], size: FloatArray, k: int) -> float:
    """Captured share of the top-``k`` groups; groups tied with the ``k``-th largest size all
    count as long-tail (so ties at the length cap are not broken arbitrarily):
    ``|candidates & tail| / min(|tail|, k)``, capped at 1."""
    kth = np.sort(size)[::-1][k - 1]
    tail = size >= kth
    return min(1.0, float(np.sum(cand & tail)) / min(int(tail.sum()), k))


def capture_rates(
    workload: Workload, model: ThroughputModel, config: CaptureConfig
) -> list[CaptureResult]:
    """Same-round and cross-step capture of ground-truth long-tail groups, one result per rho."""
    c = config
    launched = [c.groups + max(1, round(r * c.groups)) for r in c.rhos]
    g_max = max(launched)
    ids = workload.prompt_ids()
    rng = np.random.default_rng(c.seed)
    sums = np.zeros((len(c.rhos), 4))
    for rnd in range(c.rounds):
        a, b = c.step_pairs[rnd % len(c.step_pairs)]
        pick = rng.choice(len(ids), size=g_max, replace=g_max > len(ids))
        prompts = [ids[i] for i in pick.tolist()]
        la = np.stack([workload.group_lengths(p, a, c.group_size, rng) for p in prompts])
        lb = np.stack([workload.group_lengths(p, b, c.group_size, rng) for p in prompts])
        agg = np.max if c.tail_metric == "max" else np.sum
        size_a = agg(la, axis=1).astype(np.float64)
        size_b = agg(lb, axis=1).astype(np.float64)
        for j, g in enumerate(launched):
            cand = candidates_at_cutoff(
                group_completion_times_s(la[:g], c.replicas, model), c.groups
            )
            k = g - c.groups if c.tail_fraction is None else math.ceil(c.tail_fraction * g)
            sums[j] += (
                _tail_capture(cand, size_a[:g], k),
                _tail_capture(cand, size_b[:g], k),
                _tail_capture(cand, size_a[:g], 1),
                _tail_capture(cand, size_b[:g], 1),
            )
    means = sums / c.rounds
    results = []
    for j, (rho, g) in enumerate(zip(c.rhos, launched, strict=True)):
        k = g - c.groups if c.tail_fraction is None else math.ceil(c.tail_fraction * g)
        results.append(
            CaptureResult(
                rho=rho,
                launched_groups=g,
                candidates=g - c.groups,
                tail_groups=k,
                same_round_capture=float(means[j, 0]),
                cross_step_capture=float(means[j, 1]),
                same_round_top1=float(means[j, 2]),
                cross_step_top1=float(means[j, 3]),
                random_baseline=(g - c.groups) / g,
            )
        )
    return results


def default_step_pairs(num_steps: int | None, rounds: int) -> tuple[tuple[int, int], ...]:
    """Adjacent (a, a+1) pairs: over the trace's checkpoints, or (0, 1) for single-checkpoint
    split-half workloads (``num_steps`` None means unbounded, e.g. synthetic)."""
    if num_steps is None:
        return tuple((k, k + 1) for k in range(max(1, rounds)))
    if num_steps < 2:
        return ((0, 1),)
    return tuple((k, k + 1) for k in range(num_steps - 1))
