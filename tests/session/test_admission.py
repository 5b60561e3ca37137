"""Admission of sessions by KV room (``session.admission``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.session.admission import AdmissionSettings, KvAdmission, kv_bound


def test_a_new_session_fits_only_where_reservations_leave_room() -> None:
    adm = KvAdmission([100, 100], AdmissionSettings(1.0, expected_context_tokens=40))
    assert adm.with_room(10) == [0, 1]
    adm.admit("a", 0, 10)  # reserves the expected 40, not its 10
    adm.admit("b", 0, 10)
    assert adm.reserved[0] == 80
    assert not adm.fits(0, 10) and adm.fits(1, 10)
    adm.admit("c", 1, 70)  # a larger context reserves itself
    adm.admit("d", 1, 20)
    assert adm.with_room(5) == []
    adm.release("a")
    assert adm.with_room(5) == [0]


def test_an_empty_replica_always_takes_one_and_growth_and_moves_are_kept() -> None:
    adm = KvAdmission([50, 50])
    adm.admit("big", 0, 500)  # bigger than the budget: alone on an empty replica
    assert not adm.fits(0, 1) and adm.fits(1, 1)
    adm.admit("s", 1, 10)
    adm.grow("s", 30)
    assert adm.reserved[1] == 30
    adm.grow("s", 20)  # a reservation never shrinks while the session lives
    assert adm.reserved[1] == 30
    adm.admit("s", 0, 30)  # a move takes the reservation along
    assert adm.resident("s") == 0 and adm.reserved == [530, 0]
    adm.release("nobody")
    adm.release("s")
    assert adm.reserved == [500, 0]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 200)),
                max_size=40))
def test_reservations_are_what_the_residents_hold(ops: list[tuple[int, int, int]]) -> None:
    adm = KvAdmission([300, 300, None], AdmissionSettings(1.0, 50))
    held: dict[int, tuple[int, float]] = {}
    for op, session, ctx in ops:
        if op == 0:
            r = session % 3
            adm.admit(session, r, ctx)
            held[session] = (r, max(ctx, 50))
        elif op == 1:
            adm.grow(session, ctx)
            if session in held:
                r, old = held[session]
                held[session] = (r, max(old, ctx, 50))
        else:
            adm.release(session)
            held.pop(session, None)
    for r in range(3):
        want = sum(n for rr, n in held.values() if rr == r)
        assert adm.reserved[r] == pytest.approx(want)
    assert adm.fits(2, 10**9)  # no budget: always room


def test_kv_bound_compares_the_sessions_mean_context_with_all_the_kv() -> None:
    assert kv_bound(24_000, 512, [445_000] * 8)  # SWE at R = 8: 3.5x the KV
    assert not kv_bound(3_500, 512, [445_000] * 8)  # math agent: half of it
    assert not kv_bound(24_000, 512, [445_000] * 32)
    assert not kv_bound(0.0, 512, [10] * 2)  # nothing seen yet
    assert not kv_bound(24_000, 512, [445_000, None])


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="kv_share"):
        AdmissionSettings(0.0)
    with pytest.raises(ConfigError, match="expected_context_tokens"):
        AdmissionSettings(1.0, -1.0)
    with pytest.raises(ConfigError, match="at least one replica"):
        KvAdmission([])
    with pytest.raises(ConfigError, match="no replica"):
        KvAdmission([10]).admit("s", 3, 1)
