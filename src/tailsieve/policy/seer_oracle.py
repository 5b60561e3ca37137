"""Seer-style Oracle: groups broken up; individual requests balanced by known length."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import (
    RoutingPolicy,
    check_replicas,
    flat_lengths,
    greedy_by_time,
    group_sizes,
)
from tailsieve.policy.routing import Routing, routing_from_flat


class SeerOraclePolicy(RoutingPolicy):
    """Every response individually, longest first, onto the replica whose predicted
    all-admit time after adding it is smallest (LPT on the throughput model)."""

    name = "seer-oracle"
    uses_lengths = True

    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        check_replicas(num_replicas)
        flat = flat_lengths(groups)
        placed = greedy_by_time(flat, range(num_replicas), model)
        rep = np.array([placed[i] for i in range(flat.size)], dtype=np.int64)
        return routing_from_flat(rep, group_sizes(groups), num_replicas, self.name)
