"""Makespan lower bound for routing requests onto ``R`` identical replicas."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel


def makespan_lower_bound(
    lengths: npt.ArrayLike, model: ThroughputModel, num_replicas: int = 2
) -> float:
    """``max(L_max * tau(1), total_tokens / (R * max_b b / tau(b)))``, seconds.

    The first term: the longest request needs ``L_max`` decode steps, none faster than
    ``tau(1)``. The second: no replica emits more than its peak aggregate throughput, taken
    over batch sizes ``1..n`` (no replica can run more than all ``n`` requests).
    """
    if num_replicas < 1:
        raise ConfigError(f"num_replicas must be >= 1, got {num_replicas}")
    arr = np.asarray(lengths, dtype=np.float64).ravel()
    if arr.size == 0:
        return 0.0
    longest = float(arr.max()) * model.tau(1)
    peak = model.peak_aggregate_tokens_per_s(max_batch=int(arr.size))
    return max(longest, float(arr.sum()) / (num_replicas * peak))
