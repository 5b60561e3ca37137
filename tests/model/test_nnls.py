"""Non-negative least squares against solutions known in closed form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ProfileError
from tailsieve.model.nnls import nnls


def test_an_interior_solution_is_the_least_squares_one() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0.1, 1.0, (30, 4))
    x_true = np.array([0.5, 2.0, 1e-3, 7.0])
    x = nnls(a, a @ x_true)
    assert np.allclose(x, x_true, rtol=1e-8, atol=1e-12)


def test_a_negative_optimum_is_clamped_and_the_rest_refit() -> None:
    # unconstrained optimum (1, -1); with x >= 0 the answer is x2 = 0 and x1 fits alone
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = np.array([1.0, -1.0, 0.0])
    x = nnls(a, b)
    assert x[1] == 0.0
    assert x[0] == pytest.approx(0.5)


def test_columns_of_very_different_scales() -> None:
    a = np.array([[1.0, 1e7], [2.0, 3e7], [3.0, 1e7], [1.0, 5e7]])
    x_true = np.array([4e-3, 8e-11])
    assert np.allclose(nnls(a, a @ x_true), x_true, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6))
def test_never_negative_and_no_worse_than_zero(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(12, n))
    b = rng.normal(size=12)
    x = nnls(a, b)
    assert np.all(x >= 0)
    assert np.linalg.norm(a @ x - b) <= np.linalg.norm(b) + 1e-9
    # KKT: the gradient is zero on the free variables and points outward on the bound ones
    grad = a.T @ (b - a @ x)
    assert np.all(grad <= 1e-6 * (1 + np.abs(a).sum()))
    assert np.allclose(grad[x > 1e-9], 0.0, atol=1e-6)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ProfileError, match="matrix"):
        nnls(np.ones(3), np.ones(3))
    with pytest.raises(ProfileError, match="non-finite"):
        nnls(np.array([[1.0, np.nan]]), np.ones(1))
