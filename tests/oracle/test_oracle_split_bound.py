"""The count-split lower bound never exceeds the best completion of a partial assignment."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_refs import lagrangian_bounds, min_remaining_work

from tailsieve.model.profiles import load_profile
from tailsieve.oracle.pareto_dp import SPLIT_WEIGHTS
from tailsieve.oracle.split_bound import CountSplitBound

MODELS = [load_profile("cpu"), load_profile("illustrative-flat")]


def times_of(ls: np.ndarray, bits: tuple[int, ...], taus: np.ndarray) -> tuple[float, float]:
    out = [0.0, 0.0]
    count = [0, 0]
    for length, r in zip(ls, bits, strict=False):
        out[r] += length * (taus[count[r] + 1] - taus[count[r]])
        count[r] += 1
    return out[0], out[1]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 16_000), min_size=2, max_size=9),
    st.integers(0, 8),
    st.sampled_from([0, 1]),
)
def test_bounds_are_below_best_completion(lengths: list[int], k_raw: int, which: int) -> None:
    model = MODELS[which]
    ls = np.sort(np.array(lengths, dtype=np.float64))[::-1]
    n = ls.size
    k = k_raw % n
    taus = model.taus(n)
    marg = np.diff(taus)
    split = CountSplitBound(ls, marg, SPLIT_WEIGHTS)
    tables = [(w, min_remaining_work(ls, marg, w)) for w in (0.3, 0.5, 0.7)]
    for prefix in itertools.product((0, 1), repeat=k):
        best = min(
            max(times_of(ls, prefix + rest, taus))
            for rest in itertools.product((0, 1), repeat=n - k)
        )
        ta, tb = times_of(ls, prefix, taus)
        a = np.array([k - sum(prefix)], dtype=np.int64)  # count on A
        arr_a, arr_b = np.array([ta]), np.array([tb])
        assert split(k, a, arr_a, arr_b)[0] <= best * (1 + 1e-12) + 1e-12
        assert lagrangian_bounds(k, a, arr_a, arr_b, tables)[0] <= best * (1 + 1e-12) + 1e-12
