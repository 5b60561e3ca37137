"""A check planned in bounded decisions makes exactly the moves of one unbounded call."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_balancer_reference import Case, _synthetic, cases

from tailsieve.core.balance_check import plan_check
from tailsieve.core.balancer import BalanceSettings, Move, ReplicaLoad, plan_moves
from tailsieve.errors import ConfigError


def _cache(hits: Mapping[tuple[Hashable, int], int] | None, where: str) -> tuple[
        Callable[[Hashable, int], int] | None, Callable[[Hashable], Mapping[int, int]] | None]:
    if hits is None:
        return None, None
    on: dict[Hashable, dict[int, int]] = {}
    for (key, r), n in hits.items():
        on.setdefault(key, {})[r] = n
    return (lambda key, r: hits.get((key, r), 0)), (
        None if where == "none" else lambda key: on.get(key, {}))


def _check(loads: list[ReplicaLoad], horizon: float, seam: float, max_moves: int, per: int,
           cached: Callable[[Hashable, int], int] | None,
           cached_on: Callable[[Hashable], Mapping[int, int]] | None) -> list[list[Move]]:
    want = plan_moves(loads, horizon, seam, max_moves, cached, cached_on)
    decisions = list(plan_check(loads, horizon, seam, max_moves, per, cached, cached_on))
    assert [mv for d in decisions for mv in d] == want  # gains too, to the last bit
    assert all(len(d) == per for d in decisions[:-1])  # a short decision ends the check
    assert (len(decisions[-1]) < per or sum(map(len, decisions)) == max_moves
            if max_moves > 0 else decisions == [])
    return decisions


@settings(max_examples=400, deadline=None)
@given(cases(), st.integers(1, 9), st.sampled_from(["none", "exact"]))
def test_decisions_make_the_moves_of_one_call_on_random_loads(case: Case, per: int,
                                                              where: str) -> None:
    """Cost models, pools, non-accepting and identical replicas, responses counted but not
    offered, cache hits (told where, or not), move limits."""
    loads, horizon, seam, max_moves, hits = case
    _check(loads, horizon, seam, max_moves, per, *_cache(hits, where))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("per", [1, 3, 8])
def test_decisions_make_the_moves_of_one_call_at_64_replicas(seed: int, per: int) -> None:
    loads = _synthetic(seed, copies=bool(seed))
    decisions = _check(loads, 200.0, 0.05, 64, per, None, None)
    assert [len(d) for d in decisions] == [per] * (64 // per) + (
        [64 % per] if 64 % per else [])  # the many-moves case: every decision is full
    hits = {(key, r): 4000 for ld in loads for key, _ in ld.running()
            for r in range(len(loads)) if (key[1] + r) % 9 == 0}
    _check(loads, 200.0, 0.05, 64, per, *_cache(hits, "exact"))
    _check(loads, 200.0, 0.05, 64, per, *_cache(hits, "none"))


def test_a_moved_response_is_not_moved_again_in_the_check() -> None:
    """The rule that binds across decisions: a response moved by the first decision is
    counted on its destination but offered by no replica to the next."""
    tau = lambda b: 0.01 + 1e-4 * b if b > 0 else 0.0  # noqa: E731
    loads = [ReplicaLoad.of(0, [((0, j), 9000) for j in range(6)], tau, 1e-7, 1e-5),
             ReplicaLoad.of(1, [], tau, 1e-7, 1e-5), ReplicaLoad.of(2, [], tau, 1e-7, 1e-5)]
    decisions = _check(loads, 1000.0, 0.0, 64, 1, None, None)
    keys = [mv.key for d in decisions for mv in d]
    assert len(keys) >= 2 and len(set(keys)) == len(keys)


def test_the_planner_reads_the_loads_when_asked() -> None:
    """A decision reads a replica's running responses only when it becomes the costliest,
    so what the next decision sees is what the loads hold then (the caller keeps them)."""
    reads: list[int] = []
    tau = lambda b: 0.01 + 1e-4 * b if b > 0 else 0.0  # noqa: E731

    def load(r: int, n: int) -> ReplicaLoad:
        items = tuple(((r, j), 4000 + 10 * j) for j in range(n))
        ld = ReplicaLoad.of(r, items, tau, 1e-7, 1e-5)
        ld.running = lambda: reads.append(r) or items  # type: ignore[func-returns-value]
        return ld

    loads = [load(0, 12), load(1, 9), load(2, 0), load(3, 0)]
    check = plan_check(loads, 1000.0, 0.0, 64, 1)
    assert len(next(check)) == 1 and reads == [0]
    rest = [mv for d in check for mv in d]
    assert rest and reads[:2] == [0, 1] and len(set(reads)) == len(reads)  # once each


def test_decisions_of_a_check_bounded_by_its_total() -> None:
    decisions = list(plan_check(_synthetic(2), 200.0, 0.05, 20, 8))
    assert [len(d) for d in decisions] == [8, 8, 4]
    assert list(plan_check(_synthetic(2), 200.0, 0.05, 0, 8)) == []
    (last,) = list(plan_check(_synthetic(2), 0.0, 0.05, 20, 8))  # no horizon: no move
    assert last == []


def test_settings_bound_the_decision() -> None:
    assert BalanceSettings(interval_s=1.0, horizon_s=1.0).max_moves_per_decision == 2
    with pytest.raises(ConfigError):
        BalanceSettings(interval_s=1.0, horizon_s=1.0, max_moves_per_decision=0)

