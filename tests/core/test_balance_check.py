"""A check planned in bounded decisions makes exactly the moves of one unbounded call."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_balancer_reference import Case, _synthetic, cases

from tailsieve.core import balance_check
from tailsieve.core.balance_check import plan_check, settle_moves
from tailsieve.core.balancer import BalanceSettings, Move, ReplicaLoad, plan_moves
from tailsieve.errors import ConfigError


def _fresh(loads: list[ReplicaLoad]) -> list[ReplicaLoad]:
    """Copies (``plan_check`` settles moves into the loads it is given)."""
    return [ReplicaLoad(ld.replica, ld.num_running, ld.context_tokens, ld.running, ld.tau,
                        ld.context_s_per_token, ld.prefill_s_per_token, ld.prefill_s,
                        ld.accepts, ld.pool) for ld in loads]


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
    want = plan_moves(_fresh(loads), horizon, seam, max_moves, cached, cached_on)
    decisions = list(plan_check(_fresh(loads), horizon, seam, max_moves, per, cached,
                                cached_on))
    assert [mv for d in decisions for mv in d] == want  # gains too, to the last bit
    assert all(0 < len(d) <= per for d in decisions)
    assert all(len(d) == per for d in decisions[:-1])  # a short decision ends the check
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
    assert len(decisions) == -(-64 // per)  # the many-moves case: every decision is full
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


def test_settle_counts_moves_where_they_go() -> None:
    tau = lambda b: 0.01 if b > 0 else 0.0  # noqa: E731
    loads = [ReplicaLoad.of(7, [("a", 100), ("b", 300), ("c", 50)], tau, 1e-7, 1e-5),
             ReplicaLoad.of(3, [("d", 10)], tau, 1e-7, 1e-5)]
    settle_moves(loads, [Move("b", 7, 3, 300, 300, 1.0)])
    settle_moves(loads, [Move("c", 7, 3, 50, 0, 1.0)])
    assert (loads[0].num_running, loads[0].context_tokens) == (1, 100.0)
    assert (loads[1].num_running, loads[1].context_tokens) == (3, 360.0)
    assert list(loads[0].running()) == [("a", 100)]
    assert list(loads[1].running()) == [("d", 10)]  # counted there, not offered


def test_each_call_asks_for_at_most_one_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def spy(*args: object, **kw: object) -> list[Move]:
        asked.append(int(args[3]))  # type: ignore[call-overload]
        return plan_moves(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(balance_check, "plan_moves", spy)
    moves = [mv for d in plan_check(_synthetic(2), 200.0, 0.05, 20, 8) for mv in d]
    assert len(moves) == 20 and asked == [8, 8, 4]


def test_settings_bound_the_decision() -> None:
    assert BalanceSettings(interval_s=1.0, horizon_s=1.0).max_moves_per_decision == 8
    with pytest.raises(ConfigError):
        BalanceSettings(interval_s=1.0, horizon_s=1.0, max_moves_per_decision=0)

