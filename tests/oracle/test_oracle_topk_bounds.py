"""Top-k sweep and the makespan lower bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_refs import brute_force_makespan

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_time import all_admit_time
from tailsieve.oracle import makespan_lower_bound, solve_two_replicas, topk_sweep

CPU = load_profile("cpu")
GPU = load_profile("illustrative-flat")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=40), st.booleans())
def test_topk_matches_direct_evaluation(lengths: list[int], gpu: bool) -> None:
    model = GPU if gpu else CPU
    arr = np.array(lengths, dtype=np.float64)
    sweep = topk_sweep(arr, model)
    ls = np.sort(arr)[::-1]
    n = ls.size
    assert sweep.num_requests == n
    for k in range(n + 1):
        assert sweep.tail_s[k] == pytest.approx(all_admit_time(ls[:k], model), rel=1e-12, abs=1e-12)
        assert sweep.bulk_s[k] == pytest.approx(all_admit_time(ls[k:], model), rel=1e-12, abs=1e-12)
    assert sweep.best_makespan_s == pytest.approx(float(np.min(sweep.makespan_s)))
    assert sweep.makespan_s[sweep.best_k] == sweep.best_makespan_s
    # tail grows, bulk shrinks with k
    assert np.all(np.diff(sweep.tail_s) >= -1e-12)
    assert np.all(np.diff(sweep.bulk_s) <= 1e-12)


def test_topk_empty() -> None:
    sweep = topk_sweep([], CPU)
    assert sweep.best_k == 0 and sweep.best_makespan_s == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=11), st.booleans())
def test_lower_bound_below_optimum(lengths: list[int], gpu: bool) -> None:
    model = GPU if gpu else CPU
    arr = np.array(lengths, dtype=np.float64)
    lb = makespan_lower_bound(arr, model, 2)
    assert lb <= brute_force_makespan(arr, model) * (1 + 1e-12) + 1e-12
    assert lb >= arr.max() * model.tau(1) - 1e-12


def test_lower_bound_many_replicas(aime_lengths: np.ndarray) -> None:
    arr = aime_lengths[:200]
    lb = makespan_lower_bound(arr, CPU, 4)
    peak = CPU.peak_aggregate_tokens_per_s(200)
    assert lb == pytest.approx(max(arr.max() * CPU.tau(1), arr.sum() / (4 * peak)))
    assert makespan_lower_bound(arr[:60], CPU, 2) <= solve_two_replicas(arr[:60], CPU).makespan_s
    assert makespan_lower_bound([], CPU, 3) == 0.0
    with pytest.raises(ConfigError, match="num_replicas"):
        makespan_lower_bound(arr, CPU, 0)
