"""The session routers users run today, and make_router."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config, view

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.routers import SessionPolicy, make_router
from tailsieve.session.turn import TurnRequest

CONFIG = grounded_config()


def _turn(sid: object, index: int, context: int, home: int | None, group: object = "g",
          new: int | None = None) -> TurnRequest:
    cached = {home: context - new} if home is not None and new is not None else {}
    return TurnRequest(sid, group, index, context, context if new is None else new, home,
                       cached)


def test_verl_first_turn_to_fewest_in_flight_then_sticky(config: ReplicaConfig) -> None:
    r = make_router("verl-sticky", rng=np.random.default_rng(1))
    views = [view(config, 0, 3), view(config, 1, 1), view(config, 2, 2)]
    d = r.choose(_turn("a", 0, 100, None), views, 0.0)
    assert d.replica == 1 and d.reason == "first"
    busy = [view(config, 0, 0), view(config, 1, 50), view(config, 2, 0)]
    d2 = r.choose(_turn("a", 1, 300, 1, new=200), busy, 1.0)
    assert d2.replica == 1 and d2.reason == "stay" and not d2.moved


def test_verl_ties_are_random_but_seeded(config: ReplicaConfig) -> None:
    views = [view(config, i) for i in range(8)]
    picks = [make_router("verl-sticky", rng=np.random.default_rng(s)).choose(
        _turn("a", 0, 10, None), views, 0.0).replica for s in range(40)]
    assert len(set(picks)) > 3
    again = [make_router("verl-sticky", rng=np.random.default_rng(s)).choose(
        _turn("a", 0, 10, None), views, 0.0).replica for s in range(40)]
    assert picks == again


def test_verl_repicks_when_home_dies(config: ReplicaConfig) -> None:
    r = make_router("verl-sticky")
    views = [view(config, 0), view(config, 1, 4)]
    assert r.choose(_turn("a", 0, 10, None), views, 0.0).replica == 0
    dead = [view(config, 0, healthy=False), view(config, 1, 4)]
    d = r.choose(_turn("a", 1, 20, 0, new=10), dead, 1.0)
    assert d.replica == 1 and d.reason == "home-down" and d.moved


def test_affinity_margin_breaks_past_its_margin(config: ReplicaConfig) -> None:
    r = make_router("affinity-margin")
    assert r.choose(_turn("a", 0, 10, None), [view(config, 0), view(config, 1, 1)],
                    0.0).replica == 0
    within = [view(config, 0, 3), view(config, 1, 1)]
    assert r.choose(_turn("a", 1, 20, 0, new=10), within, 1.0).replica == 0
    past = [view(config, 0, 4), view(config, 1, 1)]
    d = r.choose(_turn("a", 2, 30, 0, new=10), past, 2.0)
    assert d.replica == 1 and d.reason == "move"
    again = [view(config, 0, 0), view(config, 1, 2)]
    assert r.choose(_turn("a", 3, 40, 1, new=10), again, 3.0).replica == 1  # re-pinned


def test_repin_only_while_imbalanced(config: ReplicaConfig) -> None:
    r = make_router("verl-repin", balance_abs_threshold=2, balance_rel_threshold=1.1)
    assert r.choose(_turn("a", 0, 10, None), [view(config, 0), view(config, 1, 1)],
                    0.0).replica == 0
    assert r.choose(_turn("a", 1, 20, 0, new=10), [view(config, 0, 3), view(config, 1, 1)],
                    1.0).replica == 0  # max - min = 2: balanced
    assert r.choose(_turn("a", 2, 30, 0, new=10), [view(config, 0, 4), view(config, 1, 1)],
                    2.0).replica == 1


def test_sticky_least_loaded_counts_sessions_not_requests(config: ReplicaConfig) -> None:
    r = make_router("sticky-least-loaded")
    idle = [view(config, 0), view(config, 1)]
    first = r.choose(_turn("a", 0, 10, None), idle, 0.0).replica
    # the first session is in a tool call (nothing in flight) but still counts
    second = r.choose(_turn("b", 0, 10, None), idle, 0.0).replica
    assert second != first
    r.forget("a")
    third = r.choose(_turn("c", 0, 10, None), idle, 0.0).replica
    assert third == first


def test_cache_aware_follows_the_longest_match(config: ReplicaConfig) -> None:
    r = make_router("cache-aware")
    views = [view(config, i, 2) for i in range(4)]
    a0 = r.choose(_turn("a", 0, 1000, None, "g1"), views, 0.0).replica
    b0 = r.choose(_turn("b", 0, 1000, None, "g1"), views, 0.0).replica
    assert b0 == a0  # a sibling's identical prompt matches fully
    c0 = r.choose(_turn("c", 0, 1000, None, "g2"), views, 0.0).replica
    assert c0 != a0  # no match: the smallest tree
    a1 = r.choose(_turn("a", 1, 3000, a0, "g1", new=1500), views, 1.0)
    assert a1.replica == a0 and a1.reason == "stay"


def test_cache_aware_balances_past_its_thresholds(config: ReplicaConfig) -> None:
    r = make_router("cache-aware", balance_abs_threshold=10, balance_rel_threshold=1.2)
    views = [view(config, 0, 20), view(config, 1, 5), view(config, 2, 30)]
    a0 = r.choose(_turn("a", 0, 1000, None), [view(config, 0, 20), view(config, 1, 20),
                                               view(config, 2, 0)], 0.0).replica
    assert a0 == 2  # imbalanced: the least loaded
    d = r.choose(_turn("a", 1, 2000, 2, new=900), views, 1.0)
    assert d.replica == 1 and d.moved


def test_round_robin_cycles(config: ReplicaConfig) -> None:
    r = make_router("turn-round-robin")
    views = [view(config, i) for i in range(3)]
    picks = [r.choose(_turn("a", t, 10 * (t + 1), None), views, 0.0).replica
             for t in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]


def test_length_informed_needs_lengths_and_uses_them(config: ReplicaConfig) -> None:
    with pytest.raises(ConfigError, match="remaining"):
        make_router("length-informed")
    with pytest.raises(ConfigError, match="remaining"):
        make_router("oracle")  # its former name, still understood
    assert SessionPolicy.ORACLE is SessionPolicy.LENGTH_INFORMED
    left = {("long", 1): 20000.0, ("short", 1): 50.0}
    r = make_router("length-informed", remaining=lambda sid, t: left.get((sid, t), 0.0))
    views = [view(config, 0, 30, 8000), view(config, 1, 12, 8000)]
    # told the lengths: a long turn leaves a crowded home, a short one is not worth moving
    assert r.choose(_turn("long", 1, 8000, 0, new=100), views, 50.0).moved
    assert not r.choose(_turn("short", 1, 8000, 0, new=100), views, 50.0).moved


def test_make_router_rejects_unknown_names_and_options() -> None:
    with pytest.raises(ConfigError, match="unknown session policy"):
        make_router("sticky")
    with pytest.raises(ConfigError, match="takes no option"):
        make_router("verl-sticky", margin=3)
    assert {p.value for p in SessionPolicy} >= {"verl-sticky", "cache-aware", "tailsieve"}


_loads = st.lists(st.lists(st.integers(0, 40), min_size=2, max_size=2), min_size=1,
                  max_size=30)


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 6), _loads, st.sampled_from(["verl-sticky", "sticky-least-loaded"]))
def test_sticky_baselines_stay_sticky(n: int, seq: list[list[int]], policy: str) -> None:
    """Whatever the loads, a healthy home keeps its session in verl's and prime-rl's."""
    r = make_router(policy, rng=np.random.default_rng(0))
    homes: dict[str, int] = {}
    for t, (sid_i, load) in enumerate(seq):
        sid = f"s{sid_i % 4}"
        views = [ReplicaView(i, CONFIG, (load * (i + 1)) % 37, 1000.0) for i in range(n)]
        turn = TurnRequest(sid, None, t, 100 + t, 1 if sid in homes else 100 + t,
                           homes.get(sid))
        d = r.choose(turn, views, float(t))
        if sid in homes:
            assert d.replica == homes[sid] and d.reason == "stay"
        homes[sid] = d.replica
