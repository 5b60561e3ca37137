"""verl's rebalance_requests (session.rebalance) and llm-d's burst-mode group co-location
(session.colocate) as session routers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config, view

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.colocate import GroupColocate, plan_window
from tailsieve.session.rebalance import VerlRebalance
from tailsieve.session.routers import make_router
from tailsieve.session.turn import TurnRequest


@pytest.fixture(scope="module")
def config() -> ReplicaConfig:
    return grounded_config()


def _turn(sid: object, group: object, index: int = 0, context: int = 1000,
          home: int | None = None) -> TurnRequest:
    return TurnRequest(sid, group, index, context, context if index == 0 else 10, home)


def test_rebalance_fires_when_a_replica_runs_dry_once_per_step(config: ReplicaConfig) -> None:
    r = make_router("verl-rebalance", rng=np.random.default_rng(0))
    assert isinstance(r, VerlRebalance)
    busy = [view(config, 0, running=5), view(config, 1, running=3)]
    assert not r.should_rebalance(busy)
    # a replica whose sessions are all in tool calls is not dry: they come back to it
    assert not r.should_rebalance([view(config, 0, running=5), view(config, 1, tool=2)])
    assert not r.should_rebalance([view(config, 0, running=1), view(config, 1)])
    dry = [view(config, 0, running=5), view(config, 1)]
    assert r.should_rebalance(dry)
    pins = r.rebalance(["a", "b", "c", "d", "e"], dry)
    assert sorted(np.bincount(list(pins.values()), minlength=2)) == [2, 3]
    assert not r.should_rebalance(dry)  # verl calls it once per activation
    # the new pins hold: the next turn of a session stays where the rebalance put it
    home = pins["a"]
    assert r.choose(_turn("a", "g", 1, home=home), dry, 1.0).replica == home


def test_rebalance_clears_stickiness_of_sessions_not_running(config: ReplicaConfig) -> None:
    r = make_router("verl-rebalance", rng=np.random.default_rng(0), max_rebalances=2)
    views = [view(config, 0, running=4), view(config, 1)]
    assert r.choose(_turn("idle", "g"), [view(config, 0), view(config, 1, running=1)],
                    0.0).replica == 0
    r.rebalance(["x"], views)
    # "idle" was pinned to 0; its pin is gone, so its next turn goes to the least loaded
    assert r.choose(_turn("idle", "g", 1, home=0), views, 1.0).replica == 1
    with pytest.raises(ConfigError, match="max_rebalances"):
        make_router("verl-rebalance", max_rebalances=-1)


def test_burst_plan_colocates_groups_and_balances_tokens() -> None:
    # four groups of two: two long prompts (30k) and two short (4k); two replicas
    window = [(f"{g}-{s}", g, p) for g, p in (("A", 30000), ("B", 30000), ("C", 4000),
                                              ("D", 4000)) for s in range(2)]
    plan, load = plan_window(window, [0, 1])
    for g in "ABCD":
        assert plan[f"{g}-0"] == plan[f"{g}-1"]  # each group whole on one replica
    assert plan["A-0"] != plan["B-0"]  # the long prompts apart
    assert load == {0: 34000.0, 1: 34000.0}


def test_burst_plan_splits_a_group_larger_than_the_fair_share() -> None:
    window = [(f"A-{s}", "A", 100) for s in range(6)] + [("B-0", "B", 100)]
    plan, _ = plan_window(window, [0, 1])
    counts = np.bincount(list(plan.values()), minlength=2)
    assert max(counts) <= 4  # the cap: ceil(7 / 2)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 20000)), min_size=1,
                max_size=40), st.integers(1, 5))
def test_burst_plan_places_everyone_under_the_cap(raw: list[tuple[int, int]],
                                                  replicas: int) -> None:
    prompts: dict[int, int] = {}
    window = [(i, g, prompts.setdefault(g, p)) for i, (g, p) in enumerate(raw)]
    plan, _ = plan_window(window, list(range(replicas)))
    assert set(plan) == set(range(len(window)))
    cap = -(-len(window) // replicas)
    assert max(np.bincount(list(plan.values()))) <= cap


def test_colocate_router_follows_the_plan_then_stays(config: ReplicaConfig) -> None:
    window = [("a", "A", 9000), ("b", "A", 9000), ("c", "B", 1000), ("d", "B", 1000)]
    r = make_router("group-colocate", window=window)
    views = [view(config, 0), view(config, 1)]
    first = {s: r.choose(_turn(s, g), views, 0.0).replica for s, g, _ in window}
    assert first["a"] == first["b"] != first["c"] == first["d"]
    d = r.choose(_turn("a", "A", 1, home=first["a"]), views, 5.0)
    assert d.replica == first["a"] and not d.moved
    down = [view(config, 0, healthy=first["a"] != 0), view(config, 1, healthy=first["a"] != 1)]
    assert r.choose(_turn("a", "A", 2, home=first["a"]), down, 9.0).replica != first["a"]


def test_colocate_online_places_a_group_on_its_first_turn(config: ReplicaConfig) -> None:
    r = GroupColocate()
    views = [view(config, 0), view(config, 1)]
    a = r.choose(_turn("a", "A", context=9000), views, 0.0).replica
    assert r.choose(_turn("b", "A", context=9000), views, 0.0).replica == a
    assert r.choose(_turn("c", "B", context=100), views, 0.0).replica != a
