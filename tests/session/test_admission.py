"""Admission of sessions by KV room (``session.admission``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.admission import (
    AdmissionSettings,
    KvAdmission,
    KvReading,
    StepShape,
    kv_bound,
)

PROFILE_4B, PROFILE_30B = "qwen3-4b-h100", "qwen3-30b-a3b-h100-tp2"


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


def _configs(profile: str, n: int) -> list[ReplicaConfig]:
    return [ReplicaConfig.from_profile(builtin_profile(profile),
                                       prefill_s_per_token="profile")] * n


SWE = StepShape(512, 24_000, 35_700, 450)  # the swe-agent preset's shape
MATH = StepShape(512, 3_500, 7_600, 2_400)


def test_admission_pays_where_re_prefills_clearly_outweigh_the_lost_batch() -> None:
    # Qwen3-4B / H100: the context term rules a decode step, a 24K re-prefill costs 0.55 s
    assert kv_bound(SWE, _configs(PROFILE_4B, 8))
    assert kv_bound(SWE, _configs(PROFILE_4B, 16))
    assert not kv_bound(SWE, _configs(PROFILE_4B, 32))  # the sessions fit: rho < 1
    assert not kv_bound(MATH, _configs(PROFILE_4B, 8))
    # 30B-A3B: tau(b) falls steeply per token with the batch, re-prefills are cheaper
    assert not kv_bound(SWE, _configs(PROFILE_30B, 8))
    assert kv_bound(StepShape(512, 44_800, 74_000, 600), _configs(PROFILE_30B, 8))
    # a lower margin takes the 30B SWE case too; no budget, no shape: never
    assert kv_bound(SWE, _configs(PROFILE_30B, 8), margin=1.0)
    assert not kv_bound(StepShape(512, 0.0, 0.0, 0.0), _configs(PROFILE_4B, 8))
    free = ReplicaConfig.from_profile(builtin_profile(PROFILE_4B))
    assert not kv_bound(SWE, [replace(free, kv_capacity_tokens=None)] * 8)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="kv_share"):
        AdmissionSettings(0.0)
    with pytest.raises(ConfigError, match="expected_context_tokens"):
        AdmissionSettings(1.0, -1.0)
    with pytest.raises(ConfigError, match="at least one replica"):
        KvAdmission([])
    with pytest.raises(ConfigError, match="no replica"):
        KvAdmission([10]).admit("s", 3, 1)


def test_the_engines_measured_usage_takes_room_the_reservations_leave() -> None:
    adm = KvAdmission([100, 100], AdmissionSettings(1.0, expected_context_tokens=20))
    adm.admit("a", 0, 20)
    adm.admit("b", 1, 20)
    assert adm.with_room(20) == [0, 1]  # by the reservations: 20 of 100 each
    adm.measure(0, KvReading(0.9, 0))  # another client's requests fill replica 0
    assert adm.with_room(20) == [1]
    adm.measure(0, KvReading(0.1, 0))  # less than reserved: the reservations decide
    assert adm.with_room(20) == [0, 1] and adm.with_room(81) == []
    adm.measure(0, None)  # unreadable: the reservations alone
    assert adm.with_room(80) == [0, 1]


def test_rooms_are_what_a_move_may_bring_past_the_reservations_and_the_engines_use() -> None:
    adm = KvAdmission([100, 100, None], AdmissionSettings(1.0, expected_context_tokens=30))
    adm.admit("a", 0, 10)
    adm.admit("b", 0, 50)
    assert adm.rooms() == [20.0, 100.0, float("inf")]  # 30 + 50 reserved on replica 0
    adm.measure(1, KvReading(0.9, 0))  # the engine holds more than the book reserves
    assert adm.rooms()[1] == pytest.approx(10.0)
    adm.admit("c", 0, 120)  # past its budget: no room, never below 0
    adm.measure(1, KvReading(0.1, 2))  # preempted since its last reading: no room at all
    assert adm.rooms()[:2] == [0.0, 0.0]


def test_a_preempting_replica_takes_no_new_session_until_a_reading_shows_none() -> None:
    adm = KvAdmission([100, 100])
    adm.measure(0, KvReading(0.0, 3))  # a first reading: nothing to compare with
    assert adm.with_room(10) == [0, 1]
    adm.measure(0, KvReading(0.2, 5))  # preempted since its last reading
    assert adm.with_room(10) == [1]  # not even while empty
    adm.measure(0, KvReading(0.2, 5))
    assert adm.with_room(10) == [0, 1]


def test_the_engines_kv_size_replaces_the_books() -> None:
    adm = KvAdmission([100, None], AdmissionSettings(0.5))
    adm.admit("a", 0, 10)
    adm.admit("b", 1, 10)
    assert adm.with_room(60) == [1]  # replica 1: no budget known
    adm.measure(0, KvReading(0.0, 0, capacity_tokens=400))
    adm.measure(1, KvReading(0.0, 0, capacity_tokens=100))
    assert adm.budget == [200, 50] and adm.with_room(60) == [0]
    adm.measure(0, KvReading(0.5, 0))  # no size in this reading: the book's 100
    assert adm.budget[0] == 50 and adm.measured[0] == 50
    adm.measure(1, None)
    assert adm.budget[1] == float("inf")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 60)), max_size=8),
       st.floats(0.0, 1.0), st.integers(0, 3), st.integers(1, 120))
def test_a_reading_without_a_size_never_opens_room(
        residents: list[tuple[int, int]], usage: float, preempted: int, ctx: int) -> None:
    """Measured usage and preemptions only take room away: without a KV size in the reading,
    a replica with room by the engine's account had room by the reservations alone."""
    adm = KvAdmission([100, 100])
    for i, (r, c) in enumerate(residents):
        adm.admit(i, r, c)
    book = adm.with_room(ctx)
    adm.measure(0, KvReading(0.0, 0))
    adm.measure(0, KvReading(usage, preempted))
    assert set(adm.with_room(ctx)) <= set(book)
    assert (0 in adm.with_room(ctx)) <= (preempted == 0)


def test_a_reading_must_be_a_share() -> None:
    for bad in (dict(usage=1.5, num_preemptions=0), dict(usage=0.5, num_preemptions=-1),
                dict(usage=0.5, num_preemptions=0, capacity_tokens=0)):
        with pytest.raises(ConfigError):
            KvReading(**bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        KvAdmission([100]).measure(1, KvReading(0.0, 0))
