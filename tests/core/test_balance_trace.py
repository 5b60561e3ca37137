"""The balance-check trace: what each check saw and decided, the same record live and simulated."""

from __future__ import annotations

import pytest

from tailsieve.core.balance_trace import BalanceTrace, CheckRecord, compare
from tailsieve.core.balancer import Move, ReplicaLoad, plan_moves
from tailsieve.errors import ConfigError


def _tau(b: int) -> float:
    return 0.01 + 0.001 * b


def _loads() -> list[ReplicaLoad]:
    piled = [((f"p{i}", 0), 1000) for i in range(6)]
    return [ReplicaLoad.of(0, piled, _tau, 1e-6, 1e-5), ReplicaLoad.of(1, [], _tau, 1e-6, 1e-5)]


def test_a_check_is_recorded_with_its_loads_and_moves() -> None:
    loads = _loads()
    moves = plan_moves(loads, horizon_s=10.0, seam_s=0.01)
    assert moves, "a piled replica next to an idle one must shed responses"
    tr = BalanceTrace()
    tr.record(1.5, loads, 10.0, 0.01, moves, made=len(moves) - 1)
    tr.took_effect()
    (c,) = tr.checks
    assert c.num_running == (6, 0) and c.context_tokens == (6000.0, 0.0)
    assert c.replicas == (0, 1) and c.imbalance == 6
    assert c.planned == tuple((m.src, m.dst, m.prefix_tokens) for m in moves)
    s = tr.summary()
    assert s["num_checks"] == 1 and s["checks_with_moves"] == 1
    assert s["planned"] == len(moves) and s["made"] == len(moves) - 1 and s["effective"] == 1
    assert s["mean_context_per_response"] == 1000.0
    assert c.as_dict()["planned"][0] == [0, 1, 1000]


def test_compare_gives_the_ratio_of_effective_moves() -> None:
    live, sim = BalanceTrace(), BalanceTrace()
    for _ in range(3):
        live.took_effect()
    for _ in range(2):
        sim.took_effect()
    assert compare(live, sim)["effective_ratio"] == 1.5
    assert compare(live, BalanceTrace())["effective_ratio"] is None


def test_a_record_is_validated() -> None:
    with pytest.raises(ConfigError):
        CheckRecord(0.0, (1, 2), (1.0,), (0, 1), 1.0, 0.0, (), 0)
    with pytest.raises(ConfigError):
        CheckRecord(0.0, (1,), (1.0,), (0,), 1.0, 0.0, ((0, 1, 5),), 2)
    mv = Move(("p", 0), 0, 1, 10, 10, 0.5)
    assert CheckRecord(0.0, (1,), (1.0,), (0,), 1.0, 0.0, ((mv.src, mv.dst, 10),), 1).made == 1
