"""StreamRL-style Oracle: the longest 20% of requests on dedicated low-concurrency replicas."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.errors import ConfigError
from tailsieve.model.replica_time import all_admit_time
from tailsieve.model.throughput import ThroughputModel
from tailsieve.policy.base import (
    RoutingPolicy,
    check_replicas,
    flat_lengths,
    greedy_by_time,
    group_sizes,
)
from tailsieve.policy.routing import Routing, routing_from_flat


class StreamRLOraclePolicy(RoutingPolicy):
    """The ``ceil(tail_fraction * N)`` longest requests go to ``m`` dedicated replicas, the
    rest to the other ``R - m`` (groups may split). Within each pool requests are placed
    longest-first onto the replica with the smallest predicted all-admit time. ``m`` is the
    value in ``1..R-1`` with the smallest predicted makespan (ties: smaller ``m``), or
    ``num_dedicated`` when given (clipped to ``R - 1``); with ``R = 1`` everything shares the
    one replica."""

    name = "streamrl-oracle"
    uses_lengths = True

    def __init__(self, tail_fraction: float = 0.2, num_dedicated: int | None = None) -> None:
        if not 0.0 < tail_fraction < 1.0:
            raise ConfigError(f"tail_fraction must be in (0, 1), got {tail_fraction}")
        if num_dedicated is not None and num_dedicated < 1:
            raise ConfigError(f"num_dedicated must be >= 1, got {num_dedicated}")
        self.tail_fraction = tail_fraction
        self.num_dedicated = num_dedicated

    def route(
        self, groups: Sequence[npt.ArrayLike], num_replicas: int, model: ThroughputModel
    ) -> Routing:
        check_replicas(num_replicas)
        flat = flat_lengths(groups)
        sizes = group_sizes(groups)
        if num_replicas == 1 or flat.size == 0:
            rep = np.zeros(flat.size, dtype=np.int64)
            return routing_from_flat(rep, sizes, num_replicas, self.name)
        num_tail = math.ceil(self.tail_fraction * flat.size)
        order = np.argsort(-flat, kind="stable")
        tail_idx, bulk_idx = order[:num_tail], order[num_tail:]
        best: tuple[float, npt.NDArray[np.int64]] | None = None
        fixed = self.num_dedicated
        splits = range(1, num_replicas) if fixed is None else [min(fixed, num_replicas - 1)]
        for m in splits:
            rep = np.zeros(flat.size, dtype=np.int64)
            for idx, pool in ((tail_idx, range(m)), (bulk_idx, range(m, num_replicas))):
                placed = greedy_by_time(flat[idx], pool, model)
                for j, r in placed.items():
                    rep[idx[j]] = r
            makespan = max(all_admit_time(flat[rep == r], model) for r in range(num_replicas))
            if best is None or makespan < best[0]:
                best = (makespan, rep)
        assert best is not None
        return routing_from_flat(best[1], sizes, num_replicas, self.name)
