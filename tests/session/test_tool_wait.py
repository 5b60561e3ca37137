"""Tool waits count as load for a fitted horizon only (``session.tool_wait`` in the book)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config

from tailsieve.errors import ConfigError
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.tool_wait import ToolWaitHorizon, ToolWaitSettings

CONFIG = grounded_config()


def _book(n: int = 2) -> SessionBook:
    return SessionBook([CONFIG] * n, PrefixCacheModel([CONFIG.kv_capacity_tokens] * n))


def _turn(b: SessionBook, sid: str, replica: int, ctx: int, t0: float, t1: float) -> None:
    b.request(sid, sid, ctx)
    b.start_turn(sid, replica, t0)
    b.end_turn(sid, 100, t1)


def test_an_ended_session_stops_pinning_load_after_the_prior_horizon() -> None:
    b = _book()
    _turn(b, "a", 1, 1000, 0.0, 1.0)
    prior = b.tool_waits.horizon_s
    assert prior == ToolWaitSettings().prior_s
    assert b.views(1.0 + prior - 0.1)[1].num_tool_waits == 1
    assert b.balance_loads(1.0 + prior - 0.1)[1].num_running == 1  # counted in the load
    v = b.views(1.0 + prior)[1]
    assert v.num_tool_waits == 0 and v.tool_wait_context_tokens == 0
    assert b.balance_loads(1.0 + prior)[1].num_running == 0
    # it keeps its home and its cache: its next turn still prefers replica 1
    t = b.request("a", "a", 1200)
    assert t.home == 1 and t.cached_tokens == {1: 1100}
    b.start_turn("a", 1, 500.0)  # it came back late: the fit learns from it
    assert b.tool_waits.num_observations == 1
    b.end_turn("a", 10, 501.0)
    b.end_session("a")
    assert all(x.num_tool_waits == 0 and x.num_running == 0 for x in b.views(502.0))


def test_the_horizon_follows_the_waits_seen() -> None:
    b = _book()
    for k in range(40):  # sessions that come back after 2 s
        sid = f"s{k}"
        _turn(b, sid, 0, 500, 0.0, 1.0)
        b.request(sid, sid, 700)
        b.start_turn(sid, 0, 3.0)
        b.end_turn(sid, 10, 4.0)
    assert b.tool_waits.horizon_s == pytest.approx(2.0)
    assert b.views(5.9)[0].num_tool_waits == 40
    assert b.views(6.0)[0].num_tool_waits == 0  # 2 s after their turns ended


def test_the_fit_has_a_prior_a_quantile_and_a_cap() -> None:
    h = ToolWaitHorizon(ToolWaitSettings(quantile=0.9, prior_s=30.0, prior_weight=2,
                                         cap_s=100.0))
    assert h.horizon_s == 30.0
    h.observe(1.0)
    assert h.horizon_s == 30.0  # one wait does not outvote the prior
    for _ in range(30):
        h.observe(1.0)
    assert h.horizon_s == 1.0
    for _ in range(40):
        h.observe(1000.0)
    assert h.horizon_s == 100.0  # capped
    with pytest.raises(ConfigError, match="quantile"):
        ToolWaitSettings(quantile=0.0)
    with pytest.raises(ConfigError, match="cap_s"):
        ToolWaitSettings(cap_s=float("inf"))
    with pytest.raises(ConfigError, match="tool wait"):
        h.observe(-1.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1), st.floats(0.0, 200.0)),
                max_size=40))
def test_tool_wait_counts_match_the_sessions_still_within_the_horizon(
        ops: list[tuple[int, int, float]]) -> None:
    """Whatever the order of turns and gaps: a replica's tool waits are exactly the sessions
    whose turn ended there less than the horizon ago and that have not come back."""
    b = _book()
    b.tool_waits = ToolWaitHorizon(ToolWaitSettings(prior_weight=1000, window=1))  # fixed
    now = 0.0
    ended: dict[str, tuple[int, float]] = {}
    for k, replica, gap in ops:
        now += gap
        sid = f"s{k}"
        ended.pop(sid, None)
        b.request(sid, None, 100)
        b.start_turn(sid, replica, now)
        b.end_turn(sid, 5, now)
        ended[sid] = (replica, now)
        views = b.views(now)
        h = b.tool_waits.horizon_s
        for r in (0, 1):
            want = sum(1 for rr, t in ended.values() if rr == r and now - t < h)
            assert views[r].num_tool_waits == want


def test_a_request_says_whether_its_session_still_counts_at_home() -> None:
    b = _book()
    _turn(b, "a", 1, 1000, 0.0, 1.0)
    _turn(b, "b", 1, 1000, 0.0, 1.0)
    prior = b.tool_waits.horizon_s
    t = b.request("a", "a", 1200)
    assert t.in_tool_wait  # asked within the horizon: it counts at home
    late = 1.0 + prior + 5.0
    v = b.views(late)[1]  # b's wait lapses; a asked for its turn and counts until it starts
    assert v.num_tool_waits == 1 and v.tool_wait_context_tokens == 1100
    b.start_turn("a", 1, late)
    assert b.views(late)[1].num_tool_waits == 0
    b.end_turn("a", 100, late + 1.0)
    b.views(late + 1.0 + 10 * prior)  # a's next wait lapses before it asks
    assert not b.request("a", "a", 1500).in_tool_wait


def test_a_caller_that_ends_every_session_keeps_tool_waits_counted() -> None:
    b = _book()
    b.lapse_tool_waits = False
    _turn(b, "a", 1, 1000, 0.0, 1.0)
    far = 1.0 + 100 * b.tool_waits.horizon_s
    assert b.views(far)[1].num_tool_waits == 1
    assert b.balance_loads(far)[1].num_running == 1
    b.end_session("a")
    assert b.views(far)[1].num_tool_waits == 0


def test_a_withdrawn_request_leaves_its_session_as_before() -> None:
    """A turn no replica took (``withdraw``): its session's tool wait lapses again from when
    it began, its next request is the same turn, and a session that never ran is forgotten."""
    b = _book()
    _turn(b, "a", 1, 1000, 0.0, 1.0)
    _turn(b, "b", 1, 1000, 0.5, 2.0)
    prior = b.tool_waits.horizon_s
    first = b.request("a", "a", 1200)
    b.withdraw("a")
    between = b.views(1.0 + prior + 0.2)[1]  # a's wait lapsed (it began at 1.0), b's not yet
    assert between.num_tool_waits == 1 and between.tool_wait_context_tokens == 1100
    assert b.views(2.0 + prior)[1].num_tool_waits == 0
    again = b.request("a", "a", 1200)
    assert again.turn_index == first.turn_index and again.home == 1
    assert not again.in_tool_wait  # it no longer counts at home: place_turn leaves home as is
    b.request("new", "g", 500)
    b.withdraw("new")
    fresh = b.request("new", "g", 700, 300)
    assert fresh.turn_index == 0 and fresh.home is None and fresh.new_tokens == 700
