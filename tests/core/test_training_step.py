"""The training step's speedup from the rollout's (Amdahl), and the measured rollout share."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.core.training_step import (
    DEFAULT_ROLLOUT_SHARE,
    check_rollout_share,
    measured_rollout_share,
    step_speedup,
)
from tailsieve.errors import ConfigError

speedups = st.floats(0.05, 50.0)
shares = st.floats(0.001, 1.0)


def test_llm_d_verl_benchmark_numbers() -> None:
    # rollout 31% shorter, step 4.7% shorter: the rollout was about 15% of the step
    rollout = 1 / (1 - 0.31)
    share = 0.047 / 0.31
    assert step_speedup(rollout, share) == pytest.approx(1 / (1 - 0.047))
    assert step_speedup(1.1) == pytest.approx(1 / (0.3 + 0.7 / 1.1))
    assert DEFAULT_ROLLOUT_SHARE == 0.7


@given(speedups, speedups, shares)
def test_monotone_in_the_rollout_speedup(a: float, b: float, s: float) -> None:
    lo, hi = sorted((a, b))
    assert step_speedup(lo, s) <= step_speedup(hi, s) * (1 + 1e-12)


@given(speedups, shares, shares)
def test_a_larger_share_moves_the_step_toward_the_rollout(r: float, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    step_lo, step_hi = step_speedup(r, lo), step_speedup(r, hi)
    if r >= 1:
        assert 1 <= step_lo <= step_hi * (1 + 1e-12) and step_hi <= r * (1 + 1e-12)
    else:
        assert 1 >= step_lo >= step_hi * (1 - 1e-12) and step_hi >= r * (1 - 1e-12)


@given(speedups)
def test_share_one_is_the_rollout_speedup(r: float) -> None:
    assert step_speedup(r, 1.0) == pytest.approx(r)


@given(speedups)
def test_a_vanishing_share_is_no_speedup(r: float) -> None:
    assert step_speedup(r, 1e-9) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("share", [0.0, -0.1, 1.01, math.nan, math.inf])
def test_share_outside_zero_one_is_rejected(share: float) -> None:
    with pytest.raises(ConfigError, match="rollout share"):
        check_rollout_share(share)
    with pytest.raises(ConfigError, match="rollout share"):
        step_speedup(1.1, share)


@pytest.mark.parametrize("r", [0.0, -1.0, math.nan, math.inf])
def test_bad_rollout_speedup_is_rejected(r: float) -> None:
    with pytest.raises(ConfigError, match="rollout speedup"):
        step_speedup(r, 0.5)


def test_measured_share() -> None:
    assert measured_rollout_share(30.0, 40.0) == pytest.approx(0.75)
    assert measured_rollout_share(40.0, 40.0) == 1.0
    for bad in ((0.0, 10.0), (11.0, 10.0), (1.0, 0.0), (math.nan, 1.0), ("x", 1.0), (None, 1)):
        assert measured_rollout_share(*bad) is None  # type: ignore[arg-type]

