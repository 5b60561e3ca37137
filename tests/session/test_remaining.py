"""The online estimate of a running trajectory's remaining work (``session.remaining``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.session.remaining import RemainingSettings, RemainingWork


def _run(est: RemainingWork, session: int, turns: int, out: int = 100,
         finish: bool = True) -> None:
    est.start(session, session // 8)
    for _ in range(turns):
        est.turn_ended(session, out)
    if finish:
        est.session_ended(session)


def test_without_censoring_the_fit_is_the_empirical_conditional_mean() -> None:
    est = RemainingWork(RemainingSettings(group_share=0.0))
    counts = [1, 2, 2, 3, 5, 8, 8, 13]
    for i, n in enumerate(counts):
        _run(est, i, n)
    # a fresh session (censored at its first turn, so it barely moves the curve) expects
    # the population's mean excess over one turn: mean(N) - 1
    est.start(99)
    assert est.turns_left(99) == pytest.approx(sum(counts) / len(counts) - 1, rel=0.03)
    # one that has started 6 turns: the mean excess of those that reached 6 (8, 8, 13)
    _run(est, 98, 5, finish=False)
    assert est.turns_left(98) == pytest.approx((2 + 2 + 7) / 3, rel=0.15)
    # a session past the largest count seen expects about as many more (Lindy)
    _run(est, 100, 20, finish=False)
    assert est.turns_left(100) == pytest.approx(21.0, abs=1.0)


def test_censored_running_sessions_are_not_read_as_short() -> None:
    # 8 short trajectories finished at 2 turns, 8 others still running at 10: a naive mean of
    # the finished ones says 2; Kaplan-Meier keeps the long ones in the curve
    est = RemainingWork(RemainingSettings(group_share=0.0))
    for i in range(8):
        _run(est, i, 2)
    for i in range(8, 16):
        _run(est, i, 9, finish=False)
    assert est.turns_left(8) >= 9.0


def test_more_turns_taken_means_more_left_before_anything_finished() -> None:
    est = RemainingWork()
    for i, n in enumerate([1, 3, 6, 12]):
        _run(est, i, n, finish=False)
    left = [est.turns_left(i) for i in range(4)]
    assert left == sorted(left)
    assert left[0] < left[-1]


def test_a_long_groups_unfinished_sibling_is_expected_to_run_longer() -> None:
    est = RemainingWork(RemainingSettings(group_share=0.6))
    # group 0 finished long (20 turns), group 1 short (2), every group has a runner at turn 3
    for i in range(4):
        _run(est, i, 20)
        _run(est, 8 + i, 2)
    _run(est, 7, 3, finish=False)
    _run(est, 15, 3, finish=False)
    assert est.turns_left(7) > 2 * est.turns_left(15)
    none = RemainingWork(RemainingSettings(group_share=0.0))
    for i in range(4):
        _run(none, i, 20)
        _run(none, 8 + i, 2)
    _run(none, 7, 3, finish=False)
    _run(none, 15, 3, finish=False)
    assert none.turns_left(7) == pytest.approx(none.turns_left(15))


def test_tokens_per_turn_shrinks_a_sessions_own_mean_to_the_steps() -> None:
    est = RemainingWork(RemainingSettings(prior_turns=4.0, group_share=0.0))
    _run(est, 0, 4, out=100, finish=False)
    _run(est, 1, 4, out=900, finish=False)
    assert est.turn_tokens == pytest.approx(500.0)
    assert est.tokens_per_turn(0) == pytest.approx((400 + 4 * 500) / 8)
    assert est.tokens_per_turn(1) == pytest.approx((3600 + 4 * 500) / 8)
    # what the running turn generated counts against it, never below half a turn
    assert est.tokens_left(0, 0) - est.tokens_left(0, 100) == pytest.approx(100.0)
    assert est.tokens_left(0, 10_000) == pytest.approx(
        est.tokens_per_turn(0) / 2 + est.turns_left(0) * est.tokens_per_turn(0))


def test_on_a_memoryless_population_the_estimate_tracks_the_truth() -> None:
    # geometric turn counts (mean 8): E[N - m | N >= m] = 7 whatever m. Fitted online as the
    # population runs turn by turn; checked, when 90% have finished, on sessions behind the
    # frontier (the curve is known there; past it the Lindy prior rules)
    rng = np.random.default_rng(3)
    counts = rng.geometric(1 / 8, 800)
    est = RemainingWork(RemainingSettings(group_share=0.0))
    for i in range(len(counts)):
        est.start(i)
    k = 0
    while sum(1 for n in counts if n <= k) < 0.9 * len(counts):
        k += 1
        for i, n in enumerate(counts):
            if n >= k:
                est.turn_ended(i, 100)
                if n == k:
                    est.session_ended(i)
    for m in (1, 3, 6):
        est.start(("late", m))
        for _ in range(m - 1):
            est.turn_ended(("late", m), 100)
        assert est.turns_left(("late", m)) == pytest.approx(7.0, rel=0.35)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.booleans(), st.integers(0, 3)), min_size=1,
                max_size=40),
       st.floats(0, 1), st.integers(0, 2000))
def test_estimates_are_finite_and_non_negative(runs: list[tuple[int, bool, int]], rho: float,
                                               generated: int) -> None:
    est = RemainingWork(RemainingSettings(group_share=rho))
    for i, (turns, finish, group) in enumerate(runs):
        est.start(i, group)
        for _ in range(turns):
            est.turn_ended(i, 50 + i)
        if finish:
            est.session_ended(i)
    for i in range(len(runs)):
        left = est.tokens_left(i, generated)
        assert math.isfinite(left) and left > 0
        assert est.turns_left(i) >= 0


def test_bad_input_is_refused() -> None:
    est = RemainingWork()
    with pytest.raises(ConfigError, match="unknown session"):
        est.turns_left("x")
    est.start("x")
    with pytest.raises(ConfigError, match="output_tokens"):
        est.turn_ended("x", -1)
    with pytest.raises(ConfigError, match="group_share"):
        RemainingSettings(group_share=1.5)
