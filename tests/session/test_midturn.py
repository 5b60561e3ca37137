"""session.midturn: the mid-turn balancer's inputs, built once for the simulator and the
live side (loads with tool waits, KV room, health and queued requests; the horizon)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from session_helpers import grounded_config, view

from tailsieve.core.balancer import BalanceSettings, plan_moves
from tailsieve.session.midturn import (
    AGENTIC_BALANCE,
    DEFAULT_TURN_TOKENS,
    move_horizon_s,
    move_load,
    move_loads,
    session_horizon_s,
)

CONFIG = grounded_config()
TAU = CONFIG.throughput.tau


def test_a_load_counts_its_tool_waits_and_its_running_turns_move() -> None:
    v = view(CONFIG, 0, running=3, ctx_per=1000.0, tool=2, tool_ctx_per=500.0)
    ld = move_load(v, [("a", 1000), ("b", 1000), ("c", 1000)], TAU)
    assert ld is not None
    assert ld.num_running == 5 and ld.context_tokens == pytest.approx(4000.0)
    assert [k for k, _ in ld.running()] == ["a", "b", "c"] and ld.accepts
    assert ld.context_s_per_token == CONFIG.throughput.context_s_per_token
    none = move_load(v, [("a", 1000), ("b", 1000), ("c", 1000)], TAU, tool_wait_weight=0.0)
    assert none is not None  # sessions that never come back (single-turn) do not count
    assert none.num_running == 3 and none.context_tokens == pytest.approx(3000.0)


def test_no_move_into_a_full_or_dead_replica_and_none_where_turns_wait() -> None:
    cap = CONFIG.kv_capacity_tokens
    assert cap is not None
    full = view(CONFIG, 0, running=4, ctx_per=cap / 4.5)
    assert not move_load(full, [], TAU).accepts  # type: ignore[union-attr]
    roomy = view(CONFIG, 0, running=4, ctx_per=cap / 6)
    assert move_load(roomy, [], TAU).accepts  # type: ignore[union-attr]
    dead = view(CONFIG, 0, running=1, healthy=False)
    assert not move_load(dead, [], TAU).accepts  # type: ignore[union-attr]
    assert move_load(view(CONFIG, 0, running=2, waiting=1), [], TAU) is None
    loads = move_loads([view(CONFIG, 0, running=1, waiting=1), view(CONFIG, 1)],
                       [[("a", 4000)], []], [TAU, TAU])
    assert [ld.replica for ld in loads] == [1]


def test_the_loads_move_turns_off_the_busy_replica() -> None:
    views = [view(CONFIG, 0, running=12, ctx_per=20000.0), view(CONFIG, 1)]
    running = [[(f"s{i}", 20000) for i in range(12)], []]
    moves = plan_moves(move_loads(views, running, [TAU, TAU]), 300.0, 0.05)
    assert moves and all(m.src == 0 and m.dst == 1 for m in moves)
    # the idle replica's tool waits come back to it: fewer moves pay
    waits = [views[0], replace(views[1], num_tool_waits=12, tool_wait_context_tokens=240000.0)]
    assert len(plan_moves(move_loads(waits, running, [TAU, TAU]), 300.0, 0.05)) < len(moves)


def test_the_session_horizon() -> None:
    views = [view(CONFIG, 0, running=2, ctx_per=1000.0), view(CONFIG, 1)]
    assert session_horizon_s([], 100.0, views) == 0.0
    pace = TAU(2) + CONFIG.throughput.context_s_per_token * 2000.0
    assert session_horizon_s([3, 1], 100.0, views) == pytest.approx(2 * 100.0 * pace)
    assert session_horizon_s([0, 0], None, views) == pytest.approx(DEFAULT_TURN_TOKENS * pace)
    s = BalanceSettings(interval_s=5.0, horizon_s=30.0)
    assert move_horizon_s(s, 0.0, 12.0) == 12.0 and move_horizon_s(s, 0.0, 99.0) == 30.0
    assert move_horizon_s(s, 50.0, 99.0) == 50.0  # a long step runs on about as long
    assert AGENTIC_BALANCE.interval_s == 5.0 and AGENTIC_BALANCE.seam_s == 0.05
