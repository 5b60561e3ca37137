"""Check by check: pairing two traces' checks and finding where they part (constructed traces)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balance_trace import (
    DEFERRED,
    MADE,
    SKIPPED,
    BalanceTrace,
    CheckRecord,
    MoveRecord,
)
from tailsieve.core.trace_compare import compare, differences, pair_checks
from tailsieve.errors import ConfigError


def _check(t_s: float, running: tuple[int, ...] = (4, 4), ctx: tuple[float, ...] = (400.0, 400.0),
           moves: tuple[MoveRecord, ...] = ()) -> CheckRecord:
    return CheckRecord(t_s, running, ctx, tuple(range(len(running))), 10.0, 0.05, moves)


def _move(pid: str = "a", gain_s: float = 1.0, decision: str = DEFERRED, dst: int = 1,
          effective_s: float | None = None) -> MoveRecord:
    return MoveRecord((pid, 0), 0, dst, 100, gain_s, decision, effective_s)


def _trace(*checks: CheckRecord) -> BalanceTrace:
    return BalanceTrace(checks=list(checks))


def test_pairs_keep_their_order_when_one_side_runs_slower() -> None:
    live = [_check(t) for t in (0.5, 1.0, 1.5, 2.0)]
    sim = [_check(t * 1.15) for t in (0.5, 1.0, 1.5, 2.0)]  # 15% longer: drifts by 0.3 s
    assert pair_checks(live, sim, gap_s=0.25) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    slow = [_check(t * 1.8) for t in (0.5, 1.0, 1.5, 2.0)]  # its step ran 1.8x as long
    by_place = [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert pair_checks(live, slow, gap_s=0.1) != by_place
    assert pair_checks(live, slow, gap_s=0.1, b_scale=1 / 1.8) == by_place


def test_a_check_on_one_side_only_is_left_alone_where_it_happened() -> None:
    live = [_check(t) for t in (0.5, 1.0, 1.2, 1.5)]  # a check at a completion (1.2)
    sim = [_check(t) for t in (0.5, 1.0, 1.5)]
    assert pair_checks(live, sim, gap_s=0.1) == [(0, 0), (1, 1), (2, None), (3, 2)]
    assert pair_checks(sim, live, gap_s=0.1) == [(0, 0), (1, 1), (None, 2), (2, 3)]
    far = [_check(9.0)]
    assert pair_checks(live[:1], far, gap_s=0.5) == [(0, None), (None, 0)]
    with pytest.raises(ConfigError, match="gap_s"):
        pair_checks(live, sim, gap_s=0.0)
    with pytest.raises(ConfigError, match="b_scale"):
        pair_checks(live, sim, gap_s=0.1, b_scale=0.0)


@settings(max_examples=60, deadline=None)
@given(a=st.lists(st.floats(0, 20), max_size=12), b=st.lists(st.floats(0, 20), max_size=12),
       gap=st.floats(0.01, 5.0))
def test_every_check_appears_once_in_order(a: list[float], b: list[float], gap: float) -> None:
    ca, cb = [_check(t) for t in sorted(a)], [_check(t) for t in sorted(b)]
    pairs = pair_checks(ca, cb, gap)
    assert [i for i, _ in pairs if i is not None] == list(range(len(ca)))
    assert [j for _, j in pairs if j is not None] == list(range(len(cb)))
    for i, j in pairs:
        if i is not None and j is not None:
            assert abs(ca[i].t_s - cb[j].t_s) <= 2 * gap + 1e-9


def test_differences_name_what_two_checks_saw_or_decided_differently() -> None:
    base = _check(1.0, moves=(_move(),))
    assert differences(base, _check(1.0, ctx=(430.0, 380.0), moves=(_move(),))) == ()
    assert differences(base, _check(1.0, running=(4, 3), moves=(_move(),))) == ("state",)
    assert differences(base, _check(1.0, ctx=(500.0, 400.0), moves=(_move(),))) == ("state",)
    assert differences(base, _check(1.0, moves=(_move(dst=0),))) == ("candidate",)
    assert differences(base, _check(1.0)) == ("candidate",)
    assert differences(base, _check(1.0, moves=(_move(gain_s=2.0),))) == ("gain",)
    assert differences(base, _check(1.0, moves=(_move(decision=SKIPPED),))) == ("decision",)
    took = _check(1.0, moves=(_move(effective_s=1.4),))
    assert differences(base, took) == ("effect",)
    both = _check(1.0, running=(5, 4), moves=(_move(gain_s=3.0, decision=MADE),
                                              _move("b")))
    assert differences(base, both) == ("state", "candidate", "gain", "decision")


def test_compare_reports_the_first_parting_and_the_first_whose_moves_part() -> None:
    live = _trace(_check(0.5), _check(1.0, running=(5, 3)), _check(1.5, moves=(_move(),)),
                  _check(2.0, moves=(_move("b"),)), _check(2.2))
    sim = _trace(_check(0.5), _check(1.0), _check(1.5, moves=(_move(effective_s=1.7),)),
                 _check(2.0, moves=(_move("b"),)))
    sim.took_effect(("a", 0), 1.7)
    got = compare(live, sim, gap_s=0.2)
    assert got["num_pairs"] == 4 and got["alone_without_moves"] == 1  # live's 2.2: no moves
    assert got["first_parting"]["live_check"] == 1 and got["first_parting"]["kinds"] == ["state"]
    first = got["first_move_parting"]
    assert (first["live_check"], first["sim_check"], first["kinds"]) == (2, 2, ["effect"])
    assert first["live"]["moves"][0]["effective_s"] is None
    assert first["sim"]["moves"][0]["effective_s"] == 1.7
    assert [p["live_check"] for p in got["partings"]] == [1, 2]
    assert got["partings_by_kind"]["state"] == 1 and got["partings_by_kind"]["effect"] == 1
    assert got["moves"]["live"] == {"planned": 2, "deferred": 2, "effective": 0}
    assert got["moves"]["sim"]["effective"] == 1
    assert got["effective_ratio"] == 0.0


def test_a_check_with_moves_on_one_side_only_is_a_parting() -> None:
    live = _trace(_check(0.5), _check(0.8, moves=(_move(),)), _check(1.0))
    sim = _trace(_check(0.5), _check(1.0))
    got = compare(live, sim)  # gap: half the simulator's spacing (0.25 s)
    assert got["gap_s"] == 0.25
    assert got["first_move_parting"]["kinds"] == ["unpaired"]
    assert got["first_move_parting"]["live_check"] == 1
    assert got["first_move_parting"]["sim"] is None
    assert compare(_trace(), _trace())["first_parting"] is None
