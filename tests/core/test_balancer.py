"""The pure balancer: greedy moves priced against their prefill and seam."""

from __future__ import annotations

import pytest

from tailsieve.core.balancer import BalanceSettings, ReplicaLoad, plan_moves
from tailsieve.errors import ConfigError


def _tau(b: int) -> float:
    return 0.004 + 1e-5 * b if b > 0 else 0.0


def _load(r: int, contexts: list[int], pool: int = 0, per_token: float = 1e-5) -> ReplicaLoad:
    running = [((r, j), c) for j, c in enumerate(contexts)]
    return ReplicaLoad.of(r, running, _tau, 1e-7, per_token, pool=pool)


def _cost(b: int, c: float) -> float:
    return _tau(b) + 1e-7 * c


def test_moves_from_the_costliest_replica_to_the_cheapest() -> None:
    loads = [_load(0, [8000] * 6), _load(1, [100]), _load(2, [4000] * 3)]
    moves = plan_moves(loads, horizon_s=100.0, seam_s=0.05)
    assert moves and moves[0].src == 0 and moves[0].dst == 1
    assert all(m.predicted_gain_s > 0 for m in moves)
    assert len({m.key for m in moves}) == len(moves)  # nothing moved twice in one check
    ctx = {0: 48000.0, 1: 100.0, 2: 12000.0}
    cnt = {0: 6, 1: 1, 2: 3}
    for m in moves:
        ctx[m.src] -= m.prefix_tokens
        ctx[m.dst] += m.prefix_tokens
        cnt[m.src] -= 1
        cnt[m.dst] += 1
    assert max(_cost(cnt[r], ctx[r]) for r in ctx) < _cost(6, 48000)


def test_picks_the_response_that_balances_best() -> None:
    # top holds 2k and 30k contexts; the other replica 10k: moving the 2k one barely helps,
    # moving the 30k one would overload the destination; the best single move is the one that
    # brings both sides closest to each other
    loads = [_load(0, [2000, 30000, 9000]), _load(1, [10000])]
    moves = plan_moves(loads, horizon_s=1000.0, seam_s=0.0, max_moves=1)
    assert len(moves) == 1 and moves[0].prefix_tokens == 9000


def test_no_move_when_the_gain_does_not_pay() -> None:
    loads = [_load(0, [8000] * 6, per_token=1.0), _load(1, [100], per_token=1.0)]
    assert plan_moves(loads, horizon_s=100.0, seam_s=0.05) == []
    assert plan_moves([_load(0, [8000] * 6), _load(1, [])], horizon_s=0.0, seam_s=0.0) == []
    # a huge seam: nothing pays either
    assert plan_moves([_load(0, [8000] * 6), _load(1, [])], horizon_s=10.0, seam_s=60.0) == []


def test_a_destination_takes_no_more_context_than_its_room() -> None:
    free = plan_moves([_load(0, [8000] * 6), _load(1, [])], horizon_s=100.0, seam_s=0.0)
    assert sum(m.prefix_tokens for m in free) >= 16000  # unbounded, it takes two or more
    for room in (0.0, 7999.0, 8000.0, 20000.0):
        loads = [_load(0, [8000] * 6), _load(1, [])]
        loads[1].room_tokens = room
        moves = plan_moves(loads, horizon_s=100.0, seam_s=0.0)
        assert sum(m.prefix_tokens for m in moves) == 8000 * int(room // 8000)
    # a small response fits where a large one does not: the small one moves
    loads = [_load(0, [2000, 9000, 9000]), _load(1, [])]
    loads[1].room_tokens = 5000.0
    assert [m.prefix_tokens for m in plan_moves(loads, horizon_s=1000.0, seam_s=0.0)] == [2000]


def test_balanced_replicas_make_no_move() -> None:
    loads = [_load(r, [3000] * 4) for r in range(4)]
    assert plan_moves(loads, horizon_s=1000.0, seam_s=0.0) == []


def test_moves_stay_within_a_pool() -> None:
    loads = [_load(0, [8000] * 6, pool=1), _load(1, [], pool=0)]
    assert plan_moves(loads, horizon_s=1000.0, seam_s=0.0) == []


def test_cached_prefix_is_not_prefilled_again() -> None:
    loads = [_load(0, [8000] * 6), _load(1, [])]
    moves = plan_moves(loads, horizon_s=1000.0, seam_s=0.0, max_moves=1,
                       cached=lambda key, r: 7000 if r == 1 else 0)
    assert len(moves) == 1 and moves[0].prefill_tokens == 1000
    assert moves[0].prefix_tokens == 8000


def test_settings_validate_and_horizon() -> None:
    with pytest.raises(ConfigError):
        BalanceSettings(interval_s=0.0, horizon_s=1.0)
    s = BalanceSettings(interval_s=1.0, horizon_s=0.0, expected_step_s=100.0)
    assert s.horizon_at(10.0) == pytest.approx(90.0)
    assert s.horizon_at(80.0) == pytest.approx(80.0)  # never below the time spent so far
