"""Placement decisions: spread or whole-group dealing, from acceptance and measured times."""

from __future__ import annotations

import pytest

from tailsieve.control.colocate import choose_colocation, draft_gain, k_spread
from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import LITERATURE, AcceptanceCurve

SERVER = AcceptanceCurve("srv", "suffix-siblings", ((1, 1.5), (8, 3.0)), placement="server")


def test_k_spread() -> None:
    assert k_spread(8, 8) == 1
    assert k_spread(8, 4) == 2
    assert k_spread(8, 16) == 1
    with pytest.raises(ConfigError):
        k_spread(0, 4)


@pytest.mark.parametrize("name", sorted(LITERATURE))
def test_a_source_that_ignores_placement_stays_spread_whatever_was_measured(name: str) -> None:
    """Seer's group drafter included: it sees every sibling wherever it runs."""
    c = choose_colocation(LITERATURE[name], 8, 8, 100.0, 50.0)
    assert c.dealing == "spread" and c.k == 1
    assert draft_gain(LITERATURE[name], 8, 8) == 1.0


def test_server_tree_drafts_colocate_only_when_measured_faster() -> None:
    seer = SERVER
    assert draft_gain(seer, 8, 8) == pytest.approx(3.0 / 1.5)
    faster = choose_colocation(seer, 8, 8, spread_step_s=100.0, group_step_s=80.0)
    assert faster.dealing == "group" and faster.k == 8
    slower = choose_colocation(seer, 8, 8, spread_step_s=100.0, group_step_s=120.0)
    assert slower.dealing == "spread" and slower.k == 1
    untried = choose_colocation(seer, 8, 8, 100.0, None)
    assert untried.dealing == "spread"


def test_forced_modes_and_bad_mode() -> None:
    seer = SERVER
    assert choose_colocation(seer, 8, 4, 1.0, 2.0, "group").dealing == "group"
    assert choose_colocation(seer, 8, 4, 2.0, 1.0, "spread").k == 2
    with pytest.raises(ConfigError):
        choose_colocation(seer, 8, 4, 1.0, 1.0, "sometimes")
