"""The exact DP against an independent MILP (scipy.optimize.milp / HiGHS) on n = 20-30."""

from __future__ import annotations

import numpy as np
import pytest
from milp_reference import milp_makespan

from tailsieve.model.profiles import load_profile
from tailsieve.oracle import solve_two_replicas

pytest.importorskip("scipy")

CASES = [("cpu", 20, 1), ("cpu", 24, 2), ("illustrative-flat", 20, 3), ("illustrative-flat", 30, 4)]


@pytest.mark.slow
@pytest.mark.parametrize(("profile_name", "n", "seed"), CASES)
def test_dp_equals_milp_on_aime(
    aime_lengths: np.ndarray, profile_name: str, n: int, seed: int
) -> None:
    model = load_profile(profile_name)
    lengths = np.random.default_rng(seed).choice(aime_lengths, n, replace=False)
    assert solve_two_replicas(lengths, model).makespan_s == pytest.approx(
        milp_makespan(lengths, model), rel=1e-7
    )


@pytest.mark.slow
def test_dp_equals_milp_with_ties_and_outlier() -> None:
    model = load_profile("illustrative-flat")
    rng = np.random.default_rng(5)
    lengths = np.concatenate([rng.choice([500.0, 2000.0, 16000.0], 21), [120_000.0]])
    assert solve_two_replicas(lengths, model).makespan_s == pytest.approx(
        milp_makespan(lengths, model), rel=1e-7
    )
