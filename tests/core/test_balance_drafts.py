"""Moves priced by the sibling drafts they gain or lose."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.core.balance_drafts import DraftPricing, reprice_gain
from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import LITERATURE, AcceptanceCurve

TREE = AcceptanceCurve("srv", "suffix-siblings", ((1, 1.5), (8, 3.0)), placement="server")
SEER = DraftPricing(TREE)


def test_factor_from_the_dealing() -> None:
    # two groups of 4: group 0 whole on replica 0, group 1 split 2 / 2 over replicas 1 and 2
    rho = SEER.for_dealing([0, 0, 0, 0, 1, 1, 2, 2], 4)
    seer = TREE
    assert rho(0, 0, 3) == pytest.approx(seer.tau(4) / seer.tau(1))  # leaves its 3 siblings
    assert rho(4, 1, 2) == pytest.approx(seer.tau(2) / seer.tau(3))  # joins the other two
    assert rho(0, 0, 0) == pytest.approx(1.0)
    # a response already moved away (now on 3) going back home gains its drafts
    back = rho(0, 3, 0)
    assert back == pytest.approx(seer.tau(1) / seer.tau(4))
    assert back < 1.0


def test_a_source_that_ignores_placement_prices_nothing() -> None:
    """Seer's group drafter (every sibling wherever it runs), EAGLE/MTP, prompt lookup."""
    for name in LITERATURE:
        rho = DraftPricing(LITERATURE[name]).for_dealing([0] * 8, 8)
        assert rho(3, 0, 5) == 1.0 and rho(3, 5, 0) == 1.0


def test_reprice_to_an_idle_destination_keeps_the_gain() -> None:
    # the top stays the costlier even with the destination slowed: no loss
    assert reprice_gain(2.0, 10.0, 10.0, 9.0, 4.0, 1.68) == pytest.approx(2.0)
    # the destination slowed above the top's remaining cost eats the gain
    assert reprice_gain(1.0, 10.0, 10.0, 8.0, 7.0, 1.68) < 0


@given(gain=st.floats(-5, 5), horizon=st.floats(0, 100), c=st.floats(0.01, 1),
       a=st.floats(0, 1), b=st.floats(0, 1), rho=st.floats(0.2, 5))
def test_losing_drafts_never_raises_a_gain_and_gaining_never_lowers_it(
        gain: float, horizon: float, c: float, a: float, b: float, rho: float) -> None:
    got = reprice_gain(gain, horizon, c, a, b, rho)
    if rho >= 1:
        assert got <= gain + 1e-9
    else:
        assert got >= gain - 1e-9


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError):
        SEER.factor(0, 1)
    with pytest.raises(ConfigError):
        reprice_gain(1.0, 1.0, 1.0, 1.0, 1.0, 0.0)
