"""PrefixCacheModel: per-replica LRU prefix caches in tokens."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.session.cache_model import PrefixCacheModel


def test_session_context_and_group_prompt_hits() -> None:
    c = PrefixCacheModel([None, None])
    c.insert(0, "a", "g", 1000, 5000)
    assert c.cached(0, "a", "g", 6000) == 5000
    assert c.cached(0, "a", "g", 4000) == 4000
    assert c.cached(0, "b", "g", 1000) == 1000  # a sibling's first turn: the group prompt
    assert c.cached(1, "a", "g", 6000) == 0
    assert c.cached_on("a", "g", 6000) == {0: 5000}
    assert c.used_tokens(0) == 5000


def test_lru_eviction_in_tokens() -> None:
    c = PrefixCacheModel([10_000])
    c.insert(0, "a", "ga", 1000, 4000)
    c.insert(0, "b", "gb", 1000, 4000)
    assert c.cached(0, "a", "ga", 9000) == 4000
    c.insert(0, "c", "gc", 1000, 4000)  # 12,000 tokens: the oldest (a's) goes first
    assert c.cached(0, "a", "ga", 9000) == 0
    assert c.cached(0, "c", "gc", 9000) == 4000
    assert c.used_tokens(0) <= 10_000
    assert c.num_evictions >= 1


def test_evicting_a_group_prompt_drops_its_sessions() -> None:
    c = PrefixCacheModel([None])
    c.insert(0, "a", "g", 1000, 3000)
    c.insert(0, "b", "g", 1000, 2500)
    c.set_capacity(0, 2000)
    assert c.cached(0, "a", "g", 3000) == 0 and c.cached(0, "b", "g", 3000) == 0
    assert c.used_tokens(0) <= 2000


def test_release_discard_and_drop() -> None:
    c = PrefixCacheModel([None, None])
    c.insert(0, "a", "g", 100, 900)
    c.insert(1, "a", "g", 100, 500)
    c.release(0, "a")
    assert c.cached(0, "a", "g", 900) == 100  # the group prompt stays
    c.discard("a")
    assert c.cached(1, "a", "g", 900) == 100
    c.drop_replica(1)
    assert c.cached(1, "a", "g", 900) == 0 and c.used_tokens(1) == 0
    with pytest.raises(ConfigError, match="no replica 5"):
        c.cached(5, "a", "g", 10)
    with pytest.raises(ConfigError, match="prompt_tokens"):
        c.insert(0, "x", "g", 10, 5)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 20_000), st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 3000), st.integers(0, 9000)),
    max_size=40))
def test_never_over_capacity_and_hits_never_exceed_the_prompt(
        cap: int, ops: list[tuple[int, int, int, int]]) -> None:
    c = PrefixCacheModel([cap])
    for sid, gid, prompt, extra in ops:
        c.insert(0, sid, gid, prompt, prompt + extra)
        assert c.used_tokens(0) <= cap
        for s in range(6):
            for ctx in (0, 1500, 12_000):
                assert 0 <= c.cached(0, s, gid, ctx) <= ctx


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 2),
                          st.integers(0, 2000), st.integers(0, 6000), st.integers(0, 3)),
                max_size=40))
def test_cached_on_is_cached_wherever_above_zero(
        ops: list[tuple[int, int, int, int, int, int]]) -> None:
    """The index behind ``cached_on`` agrees with asking every replica, through inserts,
    releases, discards, shrinking capacities and lost replicas."""
    c = PrefixCacheModel([9000, None, 4000])
    for r, sid, gid, prompt, extra, op in ops:
        if op == 0 or op == 1:
            c.insert(r, sid, gid, prompt, prompt + extra)
        elif op == 2:
            c.release(r, sid)
        elif extra % 3 == 0:
            c.drop_replica(r)
        else:
            c.set_capacity(r, extra)
        for s in range(5):
            for g in range(3):
                want = {x: n for x in range(3) if (n := c.cached(x, s, g, 7000)) > 0}
                assert c.cached_on(s, g, 7000) == want
