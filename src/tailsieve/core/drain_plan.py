"""LPT moves in the drain (pure, no I/O): the decision ``core.drain`` describes.

Moves are ``core.balancer.Move`` s, made exactly as the balancer's are (the simulator's
``sim.movepath``, the live rebalancer), so exactly-once delivery rests on the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import islice

from tailsieve.core.balancer import BalanceSettings, Move
from tailsieve.core.replica_load import ReplicaLoad

__all__ = ["drain_decisions", "finish_time_s", "iter_drain", "plan_drain"]


def drain_decisions(
    loads: Sequence[ReplicaLoad], settings: BalanceSettings,
    prompt_tokens: Callable[[Hashable], int],
    cached: Callable[[Hashable, int], int] | None = None,
) -> Iterator[list[Move]]:
    """A check's moves once the drain has begun (``DrainSettings.drains``; the caller asks
    for these instead of ``core.balance_check.plan_check``'s), in decisions of at most
    ``settings.max_moves_per_decision`` moves under the same contract as ``plan_check``'s
    (every one full but the last; the loads unchanged between two): ``plan_drain``'s moves,
    each running response's expected remaining tokens read from its context less
    ``prompt_tokens(key)`` over ``settings.drain``'s length sample."""
    assert settings.drain is not None
    model = settings.drain.remaining_model()

    def remaining(key: Hashable, context: int) -> float:
        return model.expected(context - prompt_tokens(key))

    per = max(1, settings.max_moves_per_decision)
    moves = iter_drain(loads, remaining, settings.seam_s, cached)
    left = settings.max_moves_per_check
    while left > 0:
        decision = list(islice(moves, min(per, left)))
        left -= len(decision)
        yield decision
        if len(decision) < per:
            return


def finish_time_s(items: Sequence[tuple[float, float]], tau: Callable[[int], float],
                  k: float) -> float:
    """Seconds until the last of ``items`` (``(context tokens, remaining tokens)``) finishes
    when all run together on one replica: ``sum_j r_(j) (tau(j) - tau(j-1))`` over the
    remaining lengths in descending order, plus the context term ``k sum_i (x_i r_i +
    r_i^2 / 2)``."""
    rems = sorted((r for _, r in items), reverse=True)
    t, prev = 0.0, 0.0
    for j, r in enumerate(rems, 1):
        tj = tau(j)
        t += r * (tj - prev)
        prev = tj
    return t + k * sum(x * r + r * r / 2.0 for x, r in items)


def plan_drain(
    loads: Sequence[ReplicaLoad], remaining: Callable[[Hashable, int], float], seam_s: float,
    max_moves: int = 64, cached: Callable[[Hashable, int], int] | None = None,
    num_destinations: int = 3,
) -> list[Move]:
    """The first ``max_moves`` moves of ``iter_drain`` (see there)."""
    return list(islice(iter_drain(loads, remaining, seam_s, cached, num_destinations),
                       max(0, max_moves)))


def iter_drain(
    loads: Sequence[ReplicaLoad], remaining: Callable[[Hashable, int], float], seam_s: float,
    cached: Callable[[Hashable, int], int] | None = None, num_destinations: int = 3,
) -> Iterator[Move]:
    """LPT moves in the drain: while the replica of the longest expected finish time
    (``finish_time_s`` with each response's ``remaining(key, context)``) can hand one of its
    responses to one of the ``num_destinations`` replicas of its pool expected to finish
    first, so that both expect to finish sooner than it does now by more than the move costs
    (prefill of the uncached prefix + seam), make the best such move. A response moves at
    most once per call; a replica that does not accept moves receives none."""
    items: list[list[tuple[Hashable, float, float]]] = []
    for ld in loads:
        items.append([(key, float(x), float(remaining(key, x))) for key, x in ld.running()]
                     if ld.num_running else [])
    fin = [_finish(loads[r], items[r]) for r in range(len(loads))]
    moved: set[Hashable] = set()
    while True:
        top = max(range(len(loads)), key=fin.__getitem__)
        t_top = fin[top]
        if t_top <= 0:
            break
        dests = sorted((d for d in range(len(loads)) if d != top and loads[d].accepts
                        and loads[d].pool == loads[top].pool), key=fin.__getitem__)
        best: tuple[float, int, int, float, int] | None = None  # gain, j, dst, new dst, uncached
        for j, (key, x, _) in enumerate(items[top]):
            if key in moved:
                continue
            rest = items[top][:j] + items[top][j + 1:]
            t_rest = _finish(loads[top], rest)
            for d in dests[:num_destinations]:
                ld = loads[d]
                hit = 0 if cached is None else min(int(x), cached(key, ld.replica))
                uncached = int(x) - hit
                price = seam_s + ld.prefill_s + ld.prefill_s_per_token * uncached
                t_d = _finish(ld, [*items[d], items[top][j]]) + price
                gain = t_top - max(t_rest, t_d)
                if gain > price and (best is None or gain > best[0]):
                    best = (gain, j, d, t_d, uncached)
        if best is None:
            break
        gain, j, d, t_d, uncached = best
        key, x, rem = items[top].pop(j)
        items[d].append((key, x, rem))
        fin[top] = _finish(loads[top], items[top])
        fin[d] = t_d
        moved.add(key)
        yield Move(key, loads[top].replica, loads[d].replica, int(x), uncached, gain)


def _finish(ld: ReplicaLoad, items: Sequence[tuple[Hashable, float, float]]) -> float:
    return finish_time_s([(x, r) for _, x, r in items], ld.tau, ld.context_s_per_token)
