"""Uniform: groups kept whole, round-robin by count. Never reads lengths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import RoutingPolicy, check_replicas, group_sizes
from tailsieve.policy.routing import Routing


class UniformPolicy(RoutingPolicy):
    """Group ``g`` goes whole to replica ``g mod R`` (paper A.2 baseline)."""

    name = "uniform"
    uses_lengths = False

    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        check_replicas(num_replicas)
        sizes = group_sizes(groups)  # sizes only: this policy must not see lengths
        parts = tuple(np.full(n, g % num_replicas, dtype=np.int64) for g, n in enumerate(sizes))
        return Routing(parts, num_replicas, self.name)
