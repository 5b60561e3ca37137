"""Co-locate or spread a group by price (``session.group_price``, used by ``place_turn``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config, view

from tailsieve.errors import ConfigError
from tailsieve.session.group_price import GroupPlacements, stack_s
from tailsieve.session.priced import place_turn
from tailsieve.session.routers import make_router
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

CONFIG = grounded_config()


def _first(prompt: int, cached_on: int | None) -> TurnRequest:
    """A sibling's first turn; the group's prompt is cached where a sibling went."""
    return TurnRequest("s1", "g", 0, prompt, prompt, None,
                       {cached_on: prompt} if cached_on is not None else {})


def test_long_prompt_short_step_co_locates() -> None:
    """A 60K-token shared prompt (seconds of prefill) in a step expected to last 20 s: the
    prefill the cache saves beats the tail one more sibling stacks; the sibling joins it."""
    views = [view(CONFIG, r, 8, 2000.0) for r in range(4)]
    s = SessionSettings(expected_step_s=20.0)
    d = place_turn(_first(60_000, 2), views, s, 0.0, siblings={2: 1})
    assert d.replica == 2 and d.prefill_tokens == 0


def test_long_step_spreads_where_the_unpriced_rule_co_locates() -> None:
    """A 4K-token prompt in a step expected to last 1000 s (an SWE step): the sibling's
    correlated tail outweighs 0.1 s of prefill, so it goes elsewhere; without the price
    (only the prefill saved) it would join its sibling."""
    views = [view(CONFIG, r, 8, 2000.0) for r in range(4)]
    s = SessionSettings(expected_step_s=1000.0)
    spread = place_turn(_first(4000, 2), views, s, 0.0, siblings={2: 1})
    assert spread.replica != 2 and spread.prefill_tokens == 4000
    unpriced = place_turn(_first(4000, 2), views, dataclasses.replace(s, group_price=False),
                          0.0, siblings={2: 1})
    assert unpriced.replica == 2


def test_the_router_spreads_a_group_over_replicas_in_a_long_step() -> None:
    """TailSieve's router records its siblings: the 4 first turns of a group land on 4
    replicas though each later one finds the prompt cached where the first went."""
    router = make_router("tailsieve", SessionSettings(expected_step_s=1000.0))
    views = [view(CONFIG, r, 8, 2000.0) for r in range(4)]
    got, cached = [], {}
    for k in range(4):
        d = router.choose(TurnRequest(f"s{k}", "g", 0, 4000, 4000, None, dict(cached)),
                          views, 0.0)
        got.append(d.replica)
        cached[d.replica] = 4000
    assert sorted(got) == [0, 1, 2, 3]


def test_stack_is_zero_without_siblings_or_with_one_replica() -> None:
    b = np.array([10.0, 10.0])
    assert stack_s(np.zeros(2), b, 100.0, 4, 0.5, 1.0).tolist() == [0.0, 0.0]
    assert stack_s(np.ones(2), b, 100.0, 1, 0.5, 1.0).tolist() == [0.0, 0.0]
    with pytest.raises(ConfigError):
        stack_s(np.ones(2), b, 100.0, 4, 1.5, 1.0)
    with pytest.raises(ConfigError, match="group_share"):
        SessionSettings(group_share=2.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 6), st.integers(0, 6), st.floats(1.0, 200.0), st.floats(0.0, 5e3),
       st.integers(2, 64))
def test_stack_grows_with_siblings_and_horizon(n: int, more: int, batch: float,
                                               horizon: float, replicas: int) -> None:
    a = stack_s(np.array([float(n)]), np.array([batch]), horizon, replicas, 0.5, 1.0)[0]
    b = stack_s(np.array([float(n + more)]), np.array([batch]), horizon, replicas, 0.5, 1.0)[0]
    c = stack_s(np.array([float(n)]), np.array([batch]), 2 * horizon, replicas, 0.5, 1.0)[0]
    assert 0.0 <= a <= b and a <= c


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from("ab"), st.integers(0, 3),
                          st.booleans()), max_size=40))
def test_placements_count_each_running_sibling_once(
        events: list[tuple[int, str, int, bool]]) -> None:
    """Whatever the order of placements, moves and ends, each group's counts are its
    running sessions where they were last placed."""
    rec, where = GroupPlacements(), {}
    for session, group, replica, end in events:
        if end:
            rec.ended(session)
            where.pop(session, None)
        else:
            g = where.get(session, (group, 0))[0]  # a session keeps its group
            rec.placed(session, g, replica)
            where[session] = (g, replica)
    for g in "ab":
        want: dict[int, int] = {}
        for grp, r in where.values():
            if grp == g:
                want[r] = want.get(r, 0) + 1
        assert dict(rec.siblings(g)) == want
    assert rec.siblings(None) == {}
