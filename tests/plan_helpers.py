"""Building ``StepPlan`` objects for hand-made test cases (the simulator's and the core's tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool


@dataclass(frozen=True, slots=True)
class Placement:
    """One group on one replica; dispatch order on a replica follows the placement order."""

    prompt_id: str
    replica: int
    pool: Pool = Pool.BULK
    pinned: bool = False


def build_plan(
    step: int,
    num_replicas: int,
    group_size: int,
    placements: Sequence[Placement],
    num_fresh_to_deliver: int | None = None,
    tail_replicas: Sequence[int] = (),
    num_extra: int = 0,
) -> StepPlan:
    """A plan launching ``placements``; by default every fresh bulk group is delivered.

    ``q`` counts the tail groups and ``m`` the tail replicas. Fresh prompt ids are the
    non-pinned bulk groups (baselines draw every group fresh).
    """
    next_order = [0] * num_replicas
    assigns: list[GroupAssignment] = []
    for p in placements:
        assigns.append(GroupAssignment(p.prompt_id, p.pool, p.replica, p.pinned,
                                       next_order[p.replica]))
        next_order[p.replica] += 1
    tail = tuple(sorted(set(tail_replicas) | {p.replica for p in placements
                                              if p.pool is Pool.TAIL}))
    fresh = tuple(p.prompt_id for p in placements if p.pool is Pool.BULK and not p.pinned)
    k = len(fresh) if num_fresh_to_deliver is None else num_fresh_to_deliver
    num_tail = sum(p.pool is Pool.TAIL for p in placements)
    num_pinned = sum(p.pinned for p in placements)
    return StepPlan(
        step=step,
        num_replicas=num_replicas,
        group_size=group_size,
        num_required=num_tail + num_pinned + k,
        q=num_tail,
        m=len(tail),
        num_extra=num_extra,
        tail_replicas=tail,
        bulk_replicas=tuple(r for r in range(num_replicas) if r not in tail),
        assignments=tuple(assigns),
        num_fresh_to_deliver=k,
        fresh_prompt_ids=fresh,
        is_warmup=False,
        is_flush=False,
    )
