"""Per-pool replica timing for the simulator: which ``ReplicaConfig`` each replica runs.

The tail pool and the bulk pool may run different speculative configs (docs/design.md, "Route-specialized speculative decoding"),
so each pool gets its own effective throughput model. A replica's pool is decided per step by
the plan (``tail_replicas``); in warm-up / uniform steps every replica is a bulk replica.
Restart cost of moving a replica between pools with different configs is not modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tailsieve.core.outcome import GroupResult
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.replica_time import context_costs
from tailsieve.model.speculative import SpecConfig
from tailsieve.oracle.fluid_bound import fluid_bound_s


@dataclass(frozen=True, slots=True)
class PoolConfigs:
    """Replica timing of the two pools (speculation already applied to each throughput)."""

    bulk: ReplicaConfig  # every replica outside the tail pool
    tail: ReplicaConfig  # replicas of the tail pool

    @classmethod
    def single(cls, config: ReplicaConfig) -> PoolConfigs:
        """Both pools identical (routing-only)."""
        return cls(bulk=config, tail=config)

    @classmethod
    def from_specs(
        cls,
        base: ReplicaConfig,
        tail_spec: SpecConfig | None = None,
        bulk_spec: SpecConfig | None = None,
    ) -> PoolConfigs:
        """Apply each pool's speculative config to the base replica's throughput model."""
        tail_spec = tail_spec or SpecConfig()
        bulk_spec = bulk_spec or SpecConfig()
        return cls(
            bulk=replace(base, throughput=bulk_spec.apply(base.throughput)),
            tail=replace(base, throughput=tail_spec.apply(base.throughput)),
        )

    def for_replica(self, replica: int, tail_replicas: Sequence[int]) -> ReplicaConfig:
        return self.tail if replica in tail_replicas else self.bulk

    def lower_bound_s(self, lengths: Sequence[int] | np.ndarray, num_replicas: int) -> float:
        """DESIGN section 3 lower bound of one batch on ``num_replicas`` replicas, with each
        term taken on the pool that makes it smaller (``oracle.bounds.makespan_lower_bound``:
        ``max(L tau(1) + own context, (work / peak + context reads) / R)``)."""
        arr = np.asarray(lengths, dtype=np.float64)
        if arr.size == 0:
            return 0.0
        longest, spread = np.inf, np.inf
        for m in (self.bulk.throughput, self.tail.throughput):
            ctx = context_costs(arr, m)
            peak = m.peak_aggregate_tokens_per_s(max_batch=int(arr.size))
            longest = min(longest, float(np.max(arr * m.tau(1) + ctx)))
            spread = min(spread, (float(arr.sum()) / peak + float(ctx.sum())) / num_replicas)
        return max(longest, spread)

    def fluid_bound_s(self, delivered: Sequence[GroupResult], num_replicas: int) -> float:
        """The fluid perfect-balance bound (``oracle.fluid_bound``) of a delivered batch on
        ``num_replicas`` replicas, prompts counted as context, on the pool whose decode model
        makes it smaller (identical pools without speculation)."""
        if not delivered:
            return 0.0
        lens = np.concatenate([np.asarray(g.response_tokens, dtype=np.int64) for g in delivered])
        prompts = np.concatenate([np.full(len(g.response_tokens), g.prompt_tokens, dtype=np.int64)
                                  for g in delivered])
        return min(fluid_bound_s(lens, c.throughput, num_replicas, prompts)
                   for c in (self.bulk, self.tail))
