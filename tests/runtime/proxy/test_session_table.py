"""``SessionTable``: sticky slots per client key (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.runtime.proxy.session_table import Lease, SessionTable


def test_a_key_s_next_turn_takes_the_slot_of_its_context() -> None:
    t = SessionTable()
    a = t.acquire("k", None, (1, 2, 3), 0.0)
    b = t.acquire("k", None, (1, 2, 3), 0.0)  # a sibling at the same time: a second slot
    assert a.session_id != b.session_id and a.first and b.first
    assert a.group_id == b.group_id == "k"
    t.release(a, (1, 2, 3, 10, 11), 1.0)
    t.release(b, (1, 2, 3, 20, 21), 1.0)
    nb = t.acquire("k", None, (1, 2, 3, 20, 21, 5), 2.0)
    na = t.acquire("k", None, (1, 2, 3, 10, 11, 5), 2.0)
    assert (na.session_id, nb.session_id) == (a.session_id, b.session_id)
    assert not na.first and not nb.first


def test_without_a_key_each_request_is_a_session_ended_with_it() -> None:
    t = SessionTable()
    a = t.acquire(None, None, (1,), 0.0)
    b = t.acquire(None, "g", (1,), 0.0)
    assert a.session_id != b.session_id and b.group_id == "g" and a.group_id is None
    assert t.release(a, (1, 2), 1.0) == a.session_id
    assert len(t) == 0


def test_idle_keys_expire_but_not_while_a_slot_runs() -> None:
    t = SessionTable(ttl_s=10.0)
    a = t.acquire("x", None, (1,), 0.0)
    b = t.acquire("y", None, (1,), 0.0)
    t.release(a, (1, 2), 1.0)
    assert t.expire(5.0) == []
    assert t.expire(20.0) == [a.session_id]  # y runs: it stays however long it runs
    t.release(b, (1, 3), 25.0)
    assert t.expire(30.0) == []
    assert t.expire(40.0) == [b.session_id] and len(t) == 0
    with pytest.raises(ConfigError):
        SessionTable(ttl_s=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.booleans(),
                          st.lists(st.integers(0, 3), min_size=1, max_size=6)), max_size=40))
def test_no_slot_is_leased_twice_at_once(ops: list[tuple[str | None, bool, list[int]]]) -> None:
    t = SessionTable()
    held: list[Lease] = []
    for key, release, ids in ops:
        if release and held:
            lease = held.pop(0)
            t.release(lease, tuple(ids), 1.0)
        else:
            held.append(t.acquire(key, None, tuple(ids), 0.0))
        running = [h.session_id for h in held]
        assert len(running) == len(set(running))
        assert t.num_running() == sum(h.key is not None for h in held)
