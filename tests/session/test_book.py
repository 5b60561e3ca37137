"""SessionBook: the live bookkeeping shared by the runtime, verl's router and the proxy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config

from tailsieve.core.balancer import plan_moves
from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.routers import make_router

CONFIG = grounded_config()


def _book(n: int = 2, config: ReplicaConfig = CONFIG) -> SessionBook:
    return SessionBook([config] * n, PrefixCacheModel([config.kv_capacity_tokens] * n))


def test_a_session_through_two_turns() -> None:
    b = _book()
    t0 = b.request("a", "g", 1000)
    assert t0.turn_index == 0 and t0.home is None and t0.new_tokens == 1000
    b.start_turn("a", 1, 0.0)
    v = b.views(0.0)
    assert v[1].num_running == 1 and v[1].context_tokens == 1000
    assert v[1].prefill_backlog_tokens == 1000
    b.progress("a", 50, 1.0)
    assert b.views(1.0)[1].context_tokens == 1050
    assert b.views(1.0)[1].prefill_backlog_tokens == 0
    b.end_turn("a", 200, 2.0)
    v = b.views(2.0)
    assert v[1].num_running == 0 and v[1].num_tool_waits == 1
    assert v[1].tool_wait_context_tokens == 1200
    assert b.expected_turn_tokens == 200
    t1 = b.request("a", "g", 1500)
    assert t1.turn_index == 1 and t1.home == 1 and t1.new_tokens == 300
    assert t1.cached_tokens == {1: 1200}
    b.start_turn("a", 1, 3.0)
    v = b.views(3.0)
    assert v[1].num_tool_waits == 0 and v[1].num_running == 1
    assert v[1].prefill_backlog_tokens == 300
    b.end_turn("a", 10, 4.0)
    b.end_session("a")
    v = b.views(5.0)
    assert all(x.num_running == 0 and x.num_tool_waits == 0 for x in v)
    assert b.num_sessions == 0


def test_siblings_hit_the_group_prompt() -> None:
    b = _book()
    b.request("a", "g", 800)
    b.start_turn("a", 0, 0.0)
    b.end_turn("a", 100, 1.0)
    t = b.request("b", "g", 800)
    assert t.cached_tokens == {0: 800}


def test_mid_turn_move_and_balance_loads() -> None:
    b = _book(2)
    for i in range(6):
        b.request(f"s{i}", None, 20000)
        b.start_turn(f"s{i}", 0, 0.0)
        b.progress(f"s{i}", 100, 1.0)
    loads = b.balance_loads(1.0)
    assert loads[0].num_running == 6 and loads[0].context_tokens == 6 * 20100
    moves = plan_moves(loads, 300.0, 0.05, cached=b.cached, cached_on=b.cached_on)
    assert moves and all(m.src == 0 and m.dst == 1 for m in moves)
    m = moves[0]
    b.move_turn(m.key, 1, 1.0)
    assert b.home(m.key) == 1
    assert b.cached(m.key, 0) == 20100  # what it held stays cached where it ran
    v = b.views(1.0)
    assert v[0].num_running == 5 and v[1].num_running == 1
    assert v[1].prefill_backlog_tokens == 20100


def test_dead_replica_loses_its_cache_and_is_unhealthy() -> None:
    b = _book(2)
    b.request("a", "g", 1000)
    b.start_turn("a", 0, 0.0)
    b.end_turn("a", 10, 1.0)
    b.set_healthy(0, False)
    t = b.request("a", "g", 1100)
    assert t.cached_tokens == {} and not b.views(1.0)[0].healthy
    d = make_router("tailsieve").choose(t, b.views(1.0), 1.0)
    assert d.replica == 1 and d.reason == "home-down"


def test_errors_name_what_is_wrong() -> None:
    b = _book(2)
    with pytest.raises(ConfigError, match="unknown session"):
        b.start_turn("x", 0, 0.0)
    b.request("a", None, 10)
    with pytest.raises(ConfigError, match="no replica 3"):
        b.start_turn("a", 3, 0.0)
    b.start_turn("a", 0, 0.0)
    with pytest.raises(ConfigError, match="still running"):
        b.request("a", None, 20)
    with pytest.raises(ConfigError, match="at least one replica"):
        SessionBook([], PrefixCacheModel([]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(1, 400)),
                min_size=1, max_size=60))
def test_counts_always_match_the_sessions(ops: list[tuple[int, int, int]]) -> None:
    """Whatever the order of turns, ends and moves, the views count every running turn and
    every session in a tool call exactly once."""
    b = _book(3)
    state: dict[str, str] = {}
    ctx: dict[str, int] = {}
    for sid_i, r, n in ops:
        sid = f"s{sid_i}"
        st_ = state.get(sid, "new")
        if st_ in ("new", "tool"):
            ctx[sid] = ctx.get(sid, 0) + n
            b.request(sid, "g", ctx[sid])
            b.start_turn(sid, r, 0.0)
            state[sid] = "run"
        elif n % 3 == 0:
            b.move_turn(sid, r, 0.0)
        else:
            b.end_turn(sid, n, 0.0)
            ctx[sid] += n
            state[sid] = "tool"
        views = b.views(0.0)
        assert sum(v.num_running for v in views) == sum(s == "run" for s in state.values())
        assert sum(v.num_tool_waits for v in views) == sum(s == "tool" for s in state.values())
        assert all(v.context_tokens >= 0 and v.prefill_backlog_tokens >= 0 for v in views)
