"""One re-balance check as a sequence of bounded decisions (pure, no I/O).

A check may make up to ``BalanceSettings.max_moves_per_check`` moves, and each move costs tens
of microseconds of planning, so one call making every move of a busy check takes milliseconds
(at 64 replicas x 4,096 in flight: up to about 8 ms). ``plan_check`` splits the check into
*decisions* of at most ``max_moves_per_decision`` moves each: the first builds the planner's
state from the loads and plans its moves; each next one carries on from where the last one
stopped (``core.balancer.iter_moves``), and a decision that makes fewer moves than it may is
the check's last. A caller makes each decision's moves (or yields to other work) before asking
for the next, so it never blocks for more than one decision.

The moves, in order, are exactly those of one ``plan_moves`` call allowed every move of the
check, so the decision size bounds the time of one decision and never changes which moves are
made: results do not depend on it, nor on the machine that chose it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from itertools import islice

from tailsieve.core.balancer import Move, ReplicaLoad, iter_moves

__all__ = ["plan_check"]


def plan_check(
    loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float, max_moves: int,
    max_moves_per_decision: int,
    cached: Callable[[Hashable, int], int] | None = None,
    cached_on: Callable[[Hashable], Mapping[int, int]] | None = None,
) -> Iterator[list[Move]]:
    """The moves of one check, decision by decision: lists of at most
    ``max_moves_per_decision`` moves (``max_moves`` in all), every one full but the last
    (which may be empty: the check found no further move). Concatenated, they are
    ``plan_moves(loads, horizon_s, seam_s, max_moves, cached, cached_on)``. Between two
    decisions the loads (and what their ``running`` return) and ``cached`` / ``cached_on``
    for the responses not yet moved must stay as they were: the planner reads them lazily."""
    per = max(1, max_moves_per_decision)
    moves = iter_moves(loads, horizon_s, seam_s, cached, cached_on)
    left = max_moves
    while left > 0:
        ask = min(per, left)
        decision = list(islice(moves, ask))
        left -= len(decision)
        yield decision
        if len(decision) < ask:
            return
