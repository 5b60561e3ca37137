"""The uniform baselines: Uniform (groups whole, round-robin by count), uniform by request
(every response round-robin on its own) and Uniform Oracle (groups whole, balanced by known
total length). The first two never read lengths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import RoutingPolicy, check_replicas, flat_lengths, group_sizes
from tailsieve.policy.routing import Routing, routing_from_flat


class UniformPolicy(RoutingPolicy):
    """Group ``g`` goes whole to replica ``g mod R`` (paper A.2 baseline)."""

    name = "uniform"
    uses_lengths = False

    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        check_replicas(num_replicas)
        sizes = group_sizes(groups)  # sizes only: this policy must not see lengths
        flat = np.repeat(np.arange(len(sizes), dtype=np.int64) % num_replicas, sizes)
        return routing_from_flat(flat, sizes, num_replicas, self.name)


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
        flat = np.arange(sum(sizes), dtype=np.int64) % num_replicas
        return routing_from_flat(flat, sizes, num_replicas, self.name)


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
        return routing_from_flat(np.repeat(target, sizes), sizes, num_replicas, self.name)
