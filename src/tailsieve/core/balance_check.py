"""One re-balance check as a sequence of bounded decisions (pure, no I/O).

A check may make up to ``BalanceSettings.max_moves_per_check`` moves; a ``plan_moves`` call
costs its setup plus tens of microseconds per move, so one call making every move of a busy
check takes milliseconds. ``plan_check`` splits the check into *decisions*: each asks
``plan_moves`` for at most ``max_moves_per_decision`` moves; a decision that makes that many
counts them in the loads (``settle_moves``) and the next decision plans from there. The moves,
in order, are exactly those of one call allowed every move of the check (a test checks it on
random loads): ``plan_moves`` keeps no state between moves beyond what the loads hold once a
move is settled, and the moved responses leave every candidate list (a response moved in a
check is not moved again in it, whichever decision moved it). So the decision size bounds the
time of each call (what a caller blocks for before its next moves can go out) and never changes
which moves are made: it is not a tuning knob, and no figure depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence

from tailsieve.core.balancer import Move, ReplicaLoad, Running, plan_moves

__all__ = ["plan_check", "settle_moves"]


def settle_moves(loads: Sequence[ReplicaLoad], moves: Sequence[Move]) -> None:
    """Count ``moves`` as made in ``loads`` (in place), as ``plan_moves`` counts them while it
    plans: each moved response leaves its source's count, context and candidates and joins
    its destination's count and context (not its candidates). ``plan_moves`` on the settled
    loads continues exactly where the call that returned ``moves`` stopped, provided each
    load's ``running`` still returns what it returned then (a snapshot, or the moves are made
    on the replicas only after the check)."""
    if not moves:
        return
    index = {ld.replica: i for i, ld in enumerate(loads)}
    gone: dict[int, set[Hashable]] = {}
    for mv in moves:  # in order: the same float sums as plan_moves makes
        src, dst = loads[index[mv.src]], loads[index[mv.dst]]
        src.num_running -= 1
        src.context_tokens -= mv.prefix_tokens
        dst.num_running += 1
        dst.context_tokens += mv.prefix_tokens
        gone.setdefault(index[mv.src], set()).add(mv.key)
    for i, keys in gone.items():
        ld = loads[i]
        if isinstance(ld.running, _Without):
            ld.running.gone |= keys
        else:
            ld.running = _Without(ld.running, keys)


def plan_check(
    loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float, max_moves: int,
    max_moves_per_decision: int,
    cached: Callable[[Hashable, int], int] | None = None,
    cached_on: Callable[[Hashable], Mapping[int, int]] | None = None,
) -> Iterator[list[Move]]:
    """The moves of one check, decision by decision (each a non-empty list of at most
    ``max_moves_per_decision``, ``max_moves`` in all), settling each decision's moves into
    ``loads`` before the next is planned. Concatenated, they are ``plan_moves(loads,
    horizon_s, seam_s, max_moves, cached, cached_on)``. ``cached`` / ``cached_on`` must not
    change for the responses that were not moved while the check runs."""
    per = max(1, max_moves_per_decision)
    left = max_moves
    while left > 0:
        ask = min(per, left)
        moves = plan_moves(loads, horizon_s, seam_s, ask, cached, cached_on)
        if moves:
            left -= len(moves)
            if len(moves) == ask and left > 0:
                settle_moves(loads, moves)
            yield moves
        if len(moves) < ask:
            return


class _Without:
    """A load's running responses less those a decision of the check already moved."""

    __slots__ = ("gone", "inner")

    def __init__(self, inner: Callable[[], Running], gone: set[Hashable]) -> None:
        self.inner = inner
        self.gone = set(gone)

    def __call__(self) -> Running:
        gone = self.gone
        return [(k, c) for k, c in self.inner() if k not in gone]
