"""Uniform by request: every response dealt round-robin on its own. Never reads lengths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import RoutingPolicy, check_replicas, group_sizes
from tailsieve.policy.routing import Routing


class UniformRequestsPolicy(RoutingPolicy):
    """Response ``j`` of the step (groups in order, their responses in order) goes to replica
    ``j mod R``: what a per-request round-robin load balancer in front of the replicas does
    (verl's default server manager balances single requests too). With ``n >= R`` each replica
    gets a response of every group. Not a paper baseline (the paper's Uniform keeps groups whole);
    it is the reference a length-blind router that may split groups has to beat."""

    name = "uniform-requests"
    uses_lengths = False

    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        check_replicas(num_replicas)
        sizes = group_sizes(groups)  # sizes only: this policy must not see lengths
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes else np.zeros(0)
        parts = tuple(
            (int(s) + np.arange(n, dtype=np.int64)) % num_replicas
            for s, n in zip(starts, sizes, strict=True)
        )
        return Routing(parts, num_replicas, self.name)
