"""The pieces that make the exact DP fast under the context term: the exact tail join, the
stacked fine-grid Lagrangian bound and the vectorised Pareto filter, each against brute force;
and the DP's result does not depend on them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_refs import brute_force_makespan, lagrangian_bounds, min_remaining_work

from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_time import context_costs
from tailsieve.oracle import solve_two_replicas
from tailsieve.oracle.pareto_dp import lagrangian_weights
from tailsieve.oracle.pareto_front import pareto_indices
from tailsieve.oracle.split_bound import LagrangianBound
from tailsieve.oracle.tail_join import join_front, tail_front

QWEN = load_profile("qwen3-4b-h100")
CPU = load_profile("cpu")
MODELS = [QWEN, CPU, CPU.with_context(3e-6)]


def added_times(
    ls: np.ndarray, own: np.ndarray, bits: tuple[int, ...], marg: np.ndarray, ca: int, cb: int
) -> tuple[float, float]:
    """What a tail assignment (1 = B) adds to replicas already running ``ca`` and ``cb``."""
    out = [0.0, 0.0]
    count = [ca, cb]
    for length, c, r in zip(ls, own, bits, strict=True):
        out[r] += length * marg[count[r]] + c
        count[r] += 1
    return out[0], out[1]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 16_000), min_size=1, max_size=8),
    st.integers(0, 6),
    st.integers(0, 6),
    st.floats(0.0, 300.0),
    st.floats(0.0, 300.0),
    st.sampled_from([0, 1, 2]),
    st.booleans(),
)
def test_tail_join_is_the_best_completion(
    lengths: list[int], ca: int, cb: int, ta: float, tb: float, which: int, capped: bool
) -> None:
    model = MODELS[which]
    ls = np.sort(np.array(lengths, dtype=np.float64))[::-1]
    own = context_costs(ls, model)
    marg = np.diff(model.taus(ca + cb + ls.size + 1))
    results = [
        max(ta + x, tb + y)
        for x, y in (
            added_times(ls, own, bits, marg, ca, cb)
            for bits in itertools.product((0, 1), repeat=ls.size)
        )
    ]
    best = min(results)
    cap = best * (1 + 1e-9) + 1e-9 if capped else np.inf
    front = tail_front(ls, own, marg, ca, cb, cap - ta, cap - tb)
    assert np.all(np.diff(front.x_s) > 0) and np.all(np.diff(front.y_s) < 0)
    vals, points = join_front(np.array([ta]), np.array([tb]), front)
    assert vals[0] == pytest.approx(best, rel=1e-12, abs=1e-12)
    bits = tuple(int(b) for b in (int(front.to_b_bits[points[0]]) >> np.arange(ls.size)) & 1)
    x, y = added_times(ls, own, bits, marg, ca, cb)
    assert max(ta + x, tb + y) == pytest.approx(best, rel=1e-12, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 16_000), min_size=2, max_size=9),
    st.integers(0, 8),
    st.sampled_from([0, 1, 2]),
)
def test_fine_grid_bound_is_below_best_completion(lengths: list[int], k_raw: int,
                                                  which: int) -> None:
    model = MODELS[which]
    ls = np.sort(np.array(lengths, dtype=np.float64))[::-1]
    n = ls.size
    k = k_raw % n
    own = context_costs(ls, model)
    marg = np.diff(model.taus(n))
    weights = lagrangian_weights(n)
    bound = LagrangianBound(ls, marg, weights, own)
    tables = [(w, min_remaining_work(ls, marg, w, own)) for w in weights]
    for prefix in itertools.product((0, 1), repeat=k):
        ta, tb = added_times(ls[:k], own[:k], prefix, marg, 0, 0)
        best = min(
            max(ta + x, tb + y)
            for x, y in (
                added_times(ls[k:], own[k:], rest, marg, k - sum(prefix), sum(prefix))
                for rest in itertools.product((0, 1), repeat=n - k)
            )
        )
        a = np.array([k - sum(prefix)], dtype=np.int64)  # count on A
        arr_a, arr_b = np.array([ta]), np.array([tb])
        got = bound(k, a, arr_a, arr_b)[0]
        assert got <= best * (1 + 1e-12) + 1e-12
        assert got == pytest.approx(lagrangian_bounds(k, a, arr_a, arr_b, tables)[0], rel=1e-12)


def test_fine_grid_respects_the_memory_budget() -> None:
    assert len(lagrangian_weights(100)) == 17
    assert 0.5 in lagrangian_weights(4000)
    for n in (100, 1000, 3000, 4000):
        w = lagrangian_weights(n)
        assert all(0.0 <= x <= 1.0 for x in w) and w == tuple(sorted(set(w)))
        assert len(w) == 3 or len(w) * (n + 1) * (n + 2) // 2 <= 32_000_000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(0, 6)),
                min_size=1, max_size=40))
def test_pareto_filter_keeps_exactly_the_front(points: list[tuple[int, int, int]]) -> None:
    a = np.array([p[0] for p in points], dtype=np.int64)
    ta = np.array([p[1] for p in points], dtype=np.float64)
    tb = np.array([p[2] for p in points], dtype=np.float64)
    kept = set(pareto_indices(a, ta, tb).tolist())
    for i in range(a.size):
        dominated = any(
            a[j] == a[i] and ta[j] <= ta[i] and tb[j] <= tb[i]
            and (ta[j] < ta[i] or tb[j] < tb[i])
            for j in range(a.size)
        )
        if not dominated:  # a non-dominated point is kept, or an equal twin of it is
            assert i in kept or any(
                j in kept and a[j] == a[i] and ta[j] == ta[i] and tb[j] == tb[i]
                for j in range(a.size)
            )
    # every dropped point is weakly dominated by a kept one
    for i in set(range(a.size)) - kept:
        assert any(a[j] == a[i] and ta[j] <= ta[i] and tb[j] <= tb[i] for j in kept)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 16_000), min_size=1, max_size=11), st.sampled_from([0, 1, 2]),
       st.integers(0, 12))
def test_dp_with_any_tail_equals_brute_force(lengths: list[int], which: int, tail: int) -> None:
    arr = np.array(lengths, dtype=np.float64)
    model = MODELS[which]
    ref = brute_force_makespan(arr, model)
    for kwargs in ({"tail_requests": tail}, {"tail_requests": tail, "beam_tail": tail},
                   {"tail_requests": tail, "beam_width": 0}):
        res = solve_two_replicas(arr, model, **kwargs)
        assert res.makespan_s == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_tail_and_weights_do_not_change_the_result_at_n60(aime_lengths: np.ndarray) -> None:
    rng = np.random.default_rng(5)
    lengths = rng.choice(aime_lengths, 60, replace=False)
    prompts = rng.integers(50, 3_000, 60).astype(np.float64)
    ref = solve_two_replicas(lengths, QWEN, prompt_tokens=prompts, tail_requests=0,
                             beam_tail=0, weights=(0.3, 0.5, 0.7)).makespan_s
    for kwargs in ({}, {"tail_requests": 5}, {"beam_tail": 0}, {"beam_width": 4}):
        got = solve_two_replicas(lengths, QWEN, prompt_tokens=prompts, **kwargs).makespan_s
        assert got == pytest.approx(ref, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 16_000), min_size=1, max_size=7),
    st.lists(st.tuples(st.floats(0.0, 300.0), st.floats(0.0, 300.0)), min_size=1, max_size=6),
    st.integers(0, 4),
    st.integers(0, 4),
    st.floats(0.0, 1.0),
    st.sampled_from([0, 1, 2]),
)
def test_tail_front_pruned_by_join_states_stays_exact_below_the_cap(
    lengths: list[int], offsets: list[tuple[float, float]], ca: int, cb: int, where: float,
    which: int,
) -> None:
    model = MODELS[which]
    ls = np.sort(np.array(lengths, dtype=np.float64))[::-1]
    own = context_costs(ls, model)
    marg = np.diff(model.taus(ca + cb + ls.size + 1))
    ta = np.array([o[0] for o in offsets])
    tb = np.array([o[1] for o in offsets])
    added = [
        added_times(ls, own, bits, marg, ca, cb)
        for bits in itertools.product((0, 1), repeat=ls.size)
    ]
    best = np.array([min(max(a + x, b + y) for x, y in added) for a, b in zip(ta, tb, strict=True)])
    cap = float(best.min() + where * (best.max() - best.min()) + 1e-9)
    front = tail_front(ls, own, marg, ca, cb, np.inf, np.inf, (ta, tb, cap))
    vals, _ = join_front(ta, tb, front)
    below = best < cap
    assert np.allclose(vals[below], best[below], rtol=1e-12, atol=1e-12)
    assert np.all(vals >= best * (1 - 1e-12) - 1e-12)
