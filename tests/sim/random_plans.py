"""Random step plans for the simulator's property tests."""

from __future__ import annotations

import numpy as np

from plan_helpers import Placement, build_plan
from tailsieve.core.plan import StepPlan
from tailsieve.core.pool import Pool


def random_plan(rng: np.random.Generator, num_replicas: int, group_size: int, num_groups: int,
                step: int, tail_from: int) -> StepPlan:
    """``num_groups`` groups on random replicas; with at least ``tail_from`` replicas, replica
    0 is a one-replica tail pool; a fifth of the bulk groups pinned (carried), and a random
    number of the fresh ones to deliver."""
    has_tail = num_replicas >= tail_from
    placements = []
    for i in range(num_groups):
        r = int(rng.integers(num_replicas))
        tail = has_tail and r == 0
        pinned = not tail and rng.random() < 0.2
        placements.append(Placement(f"p{i}", r, Pool.TAIL if tail else Pool.BULK, pinned))
    num_fresh = sum(p.pool is Pool.BULK and not p.pinned for p in placements)
    k = int(rng.integers(0, num_fresh + 1)) if num_fresh else 0
    return build_plan(step, num_replicas, group_size, placements, num_fresh_to_deliver=k,
                      tail_replicas=(0,) if has_tail else ())
