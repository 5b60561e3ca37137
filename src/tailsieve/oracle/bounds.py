"""Makespan lower bound for routing requests onto ``R`` identical replicas."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.replica_time import context_costs
from tailsieve.model.throughput import ThroughputModel


def makespan_lower_bound(
    lengths: npt.ArrayLike,
    model: ThroughputModel,
    num_replicas: int = 2,
    prompt_tokens: npt.ArrayLike | None = None,
) -> float:
    """``max(max_i (L_i tau(1) + c_i), (total_tokens / peak + sum_i c_i) / R)``, seconds, with
    ``c_i = k * (P_i L_i + L_i^2 / 2)`` the context term's cost of request ``i`` (0 without it).

    The first term: a request needs ``L_i`` decode steps, none faster than ``tau(1)``, and each
    of them reads at least its own context (``L_max tau(1)`` without the context term). The
    second: a replica's decode steps at batch ``b`` last at least ``b / peak`` each (peak
    aggregate throughput over batch sizes ``1..n``), and their context reads add up to exactly
    the ``c_i`` of the requests it runs; the busiest replica is at least the average.
    """
    if num_replicas < 1:
        raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
    arr = np.asarray(lengths, dtype=np.float64).ravel()
    if arr.size == 0:
        return 0.0
    ptoks = None if prompt_tokens is None else np.asarray(prompt_tokens, dtype=np.float64).ravel()
    ctx = context_costs(arr, model, ptoks)
    longest = float(np.max(arr * model.tau(1) + ctx))
    peak = model.peak_aggregate_tokens_per_s(max_batch=int(arr.size))
    return max(longest, (float(arr.sum()) / peak + float(ctx.sum())) / num_replicas)
