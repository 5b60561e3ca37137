"""The balance-check trace: what each check saw and decided, the same record live and simulated."""

from __future__ import annotations

import pytest

from tailsieve.core.balance_trace import (
    DEFERRED,
    MADE,
    REFUSED,
    SKIPPED,
    BalanceTrace,
    CheckRecord,
    MoveRecord,
)
from tailsieve.core.balancer import Move, ReplicaLoad, plan_moves
from tailsieve.errors import ConfigError


def _tau(b: int) -> float:
    return 0.01 + 0.001 * b


def _loads() -> list[ReplicaLoad]:
    piled = [((f"p{i}", 0), 1000) for i in range(6)]
    return [ReplicaLoad.of(0, piled, _tau, 1e-6, 1e-5), ReplicaLoad.of(1, [], _tau, 1e-6, 1e-5)]


def test_a_check_is_recorded_with_its_loads_candidates_gains_and_decisions() -> None:
    loads = _loads()
    moves = plan_moves(loads, horizon_s=10.0, seam_s=0.01)
    assert len(moves) >= 3, "a piled replica next to an idle one must shed responses"
    decisions = [DEFERRED, SKIPPED, REFUSED] + [MADE] * (len(moves) - 3)
    tr = BalanceTrace()
    tr.record(1.5, loads, 10.0, 0.01, [MoveRecord.of(mv, mv.key, d)
                                      for mv, d in zip(moves, decisions, strict=True)])
    (c,) = tr.checks
    assert c.num_running == (6, 0) and c.context_tokens == (6000.0, 0.0)
    assert c.replicas == (0, 1) and c.imbalance == 6
    assert [m.candidate for m in c.moves] == [(mv.key, mv.src, mv.dst) for mv in moves]
    assert [m.gain_s for m in c.moves] == [mv.predicted_gain_s for mv in moves]
    assert c.num_planned == len(moves) and c.num_made == len(moves) - 2  # deferred counts
    s = tr.summary()
    assert s["num_checks"] == 1 and s["checks_with_moves"] == 1
    assert (s["planned"], s["made"], s["deferred"], s["skipped"], s["refused"]) == (
        len(moves), len(moves) - 2, 1, 1, 1)
    assert s["mean_context_per_response"] == 1000.0
    d = c.as_dict()
    assert d["moves"][0]["response"] == list(moves[0].key) and d["moves"][0]["src"] == 0
    assert d["moves"][1]["decision"] == SKIPPED and d["planned"] == len(moves)


def test_a_move_takes_effect_on_the_last_made_move_of_its_response() -> None:
    loads = _loads()
    mv = Move(("p0", 0), 0, 1, 1000, 1000, 0.5)
    other = Move(("p1", 0), 0, 1, 1000, 1000, 0.4)
    tr = BalanceTrace()
    tr.record(1.0, loads, 10.0, 0.01, [MoveRecord.of(mv, mv.key, DEFERRED),
                                      MoveRecord.of(other, other.key, REFUSED)])
    tr.took_effect(("p1", 0), 1.5)  # refused: nothing of it takes effect
    tr.took_effect(("p0", 0), 2.0)
    tr.took_effect(("p0", 0), 3.0)  # no move of it open any more: counted only
    first, refused = tr.checks[0].moves
    assert first.effective_s == 2.0 and refused.effective_s is None
    assert tr.num_effective == 3 and tr.summary()["effective"] == 3


def test_a_record_is_validated() -> None:
    with pytest.raises(ConfigError, match="one count and one context"):
        CheckRecord(0.0, (1, 2), (1.0,), (0, 1), 1.0, 0.0)
    with pytest.raises(ConfigError, match="decision 'moved'"):
        MoveRecord(("p", 0), 0, 1, 10, 0.5, "moved")


def test_a_move_made_before_its_check_is_recorded_may_take_effect_first() -> None:
    """A live check makes its decisions with the event loop free between them."""
    mv = Move(("p0", 0), 0, 1, 1000, 1000, 0.5)
    rec = MoveRecord.of(mv, mv.key, MADE)
    tr = BalanceTrace()
    tr.made(rec)
    tr.took_effect(("p0", 0), 1.2)
    tr.record(1.0, _loads(), 10.0, 0.01, [rec])
    tr.took_effect(("p0", 0), 5.0)  # nothing open: the record keeps its first effect
    assert tr.checks[0].moves[0].effective_s == 1.2 and tr.num_effective == 2
