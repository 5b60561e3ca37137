"""A straggler replica priced at its own fitted speed (``SessionBook.set_throughput`` with
``speeds``): ``place_turn`` sends new work elsewhere and mid-turn moves take running turns off
it, where one curve for every replica sees nothing."""

from __future__ import annotations

import pytest
from session_helpers import grounded_config

from tailsieve.core.balancer import plan_moves
from tailsieve.errors import ConfigError
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.priced import place_turn
from tailsieve.session.settings import SessionSettings

CONFIG = grounded_config()
SLOW = (1.0, 1.0, 4.0)


def book(running: tuple[int, ...], speeds: tuple[float, ...] | None = None) -> SessionBook:
    """Three replicas with ``running[r]`` turns of 6,000 tokens, 100 tokens generated each."""
    b = SessionBook([CONFIG] * 3, PrefixCacheModel([CONFIG.kv_capacity_tokens] * 3))
    if speeds is not None:
        b.set_throughput(CONFIG.throughput, speeds)
    for r, n in enumerate(running):
        for i in range(n):
            key = f"r{r}-{i}"
            b.request(key, key, 6000)
            b.start_turn(key, r, 0.0)
            b.progress(key, 100, 1.0)
    return b


def test_speeds_scale_each_replica_s_decode_and_prefill() -> None:
    b = book((0, 0, 0), SLOW)
    fast, slow = b.configs[0], b.configs[2]
    assert fast.throughput is CONFIG.throughput and b.configs[1].throughput is fast.throughput
    assert slow.throughput.tau(8) == pytest.approx(4 * CONFIG.throughput.tau(8))
    assert slow.prefill_cost_s(5000) == pytest.approx(4 * CONFIG.prefill_cost_s(5000))
    assert b.views(0.0)[2].config is slow
    b.set_throughput(CONFIG.throughput)  # no speeds: every replica at the curve again
    assert all(c.throughput is CONFIG.throughput for c in b.configs)
    with pytest.raises(ConfigError, match="3 replicas"):
        b.set_throughput(CONFIG.throughput, (1.0, 2.0))
    with pytest.raises(ConfigError, match="finite and > 0"):
        b.set_throughput(CONFIG.throughput, (1.0, 0.0, 1.0))


def test_place_turn_avoids_the_slow_replica() -> None:
    load = (6, 6, 2)  # the straggler has the fewest turns
    settings = SessionSettings()
    one_curve = book(load)
    turn = one_curve.request("new", "new", 4000)
    assert place_turn(turn, one_curve.views(1.0), settings, 1.0).replica == 2
    fitted = book(load, SLOW)
    turn = fitted.request("new", "new", 4000)
    assert place_turn(turn, fitted.views(1.0), settings, 1.0).replica in (0, 1)


def test_mid_turn_moves_leave_the_slow_replica() -> None:
    load = (8, 8, 8)  # even counts: one curve sees a balanced fleet
    one_curve = book(load)
    kw = {"cached": one_curve.cached, "cached_on": one_curve.cached_on}
    assert plan_moves(one_curve.balance_loads(1.0), 300.0, 0.05, **kw) == []
    fitted = book(load, SLOW)
    moves = plan_moves(fitted.balance_loads(1.0), 300.0, 0.05, cached=fitted.cached,
                       cached_on=fitted.cached_on)
    assert sum(m.src == 2 for m in moves) >= 4 and all(m.dst != 2 for m in moves)
