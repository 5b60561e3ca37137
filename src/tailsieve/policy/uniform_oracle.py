"""Uniform Oracle: groups kept whole, balanced by known total generation length."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import RoutingPolicy, check_replicas, flat_lengths, group_sizes
from tailsieve.policy.routing import Routing


class UniformOraclePolicy(RoutingPolicy):
    """LPT greedy: groups by descending total tokens, each onto the replica with the fewest
    total tokens so far (ties: lowest index)."""

    name = "uniform-oracle"
    uses_lengths = True

    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        check_replicas(num_replicas)
        flat_lengths(groups)  # validate
        totals = np.array([float(np.sum(np.asarray(g, dtype=np.float64))) for g in groups])
        load = np.zeros(num_replicas)
        target = np.zeros(len(groups), dtype=np.int64)
        for g in np.argsort(-totals, kind="stable").tolist():
            r = int(np.argmin(load))
            target[g] = r
            load[r] += totals[g]
        sizes = group_sizes(groups)
        parts = tuple(np.full(n, target[g], dtype=np.int64) for g, n in enumerate(sizes))
        return Routing(parts, num_replicas, self.name)
