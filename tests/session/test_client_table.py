"""``ClientSessions``: the proxy's and verl's client-to-session table (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.session.client_table import ClientSessions, Lease


def test_a_key_s_next_turn_takes_the_slot_of_its_context() -> None:
    t = ClientSessions()
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


def test_the_prompt_is_needed_only_to_choose_among_free_slots() -> None:
    t = ClientSessions()
    assert not t.needs_prompt(None) and not t.needs_prompt("k")
    a = t.acquire("k", None, (1, 2), 0.0)
    b = t.acquire("k", None, (1, 2), 0.0)
    assert not t.needs_prompt("k")  # both run: a new turn opens a slot
    t.release(a, (1, 2, 3), 1.0)
    assert not t.needs_prompt("k")  # one free: any prompt takes it
    t.release(b, (1, 2, 4), 1.0)
    assert t.needs_prompt("k")  # two free: the prompt's prefix picks
    t.finish("k")
    assert not t.needs_prompt("k")


def test_without_a_key_each_request_is_a_session_ended_with_it() -> None:
    t = ClientSessions()
    a = t.acquire(None, None, (1,), 0.0)
    b = t.acquire(None, "g", (1,), 0.0)
    assert a.session_id != b.session_id and b.group_id == "g" and a.group_id is None
    assert t.release(a, (1, 2), 1.0) == a.session_id
    assert len(t) == 0


def test_idle_keys_expire_but_not_while_a_slot_runs() -> None:
    t = ClientSessions(ttl_s=10.0)
    a = t.acquire("x", None, (1,), 0.0)
    b = t.acquire("y", None, (1,), 0.0)
    t.release(a, (1, 2), 1.0)
    assert t.expire(5.0) == []
    assert t.expire(20.0) == [a.session_id]  # y runs: it stays however long it runs
    t.release(b, (1, 3), 25.0)
    assert t.expire(30.0) == []
    assert t.expire(40.0) == [b.session_id] and len(t) == 0
    with pytest.raises(ConfigError):
        ClientSessions(ttl_s=0)
    with pytest.raises(ConfigError, match="max_sessions"):
        ClientSessions(max_sessions=0)


def test_verl_trajectories_end_when_silent_or_too_many() -> None:
    """verl's use: a trajectory's ``request_id`` is the key, its first prompt's hash the group;
    beyond ``max_sessions`` the least recently used idle slot goes, and ids are never reused."""
    t = ClientSessions(ttl_s=10.0, max_sessions=2)
    a = t.acquire("a", hash((1, 2)), [1, 2], 0.0)
    b = t.acquire("b", hash((1, 2)), [1, 2], 1.0)
    assert a.group_id == b.group_id  # siblings: the same first prompt
    dup = t.acquire("a", hash((1, 2, 3)), [1, 2, 3], 2.0)  # a second turn of "a" at once
    assert len({a.session_id, b.session_id, dup.session_id}) == 3
    t.release(a, [1, 2], 3.0)
    t.release(dup, [1, 2, 3], 3.0)
    nxt = t.acquire("a", hash((1, 2, 5)), [1, 2, 5], 3.5)  # its next turn: its own slot
    assert nxt.session_id == a.session_id and nxt.group_id == a.group_id
    t.release(nxt, [1, 2, 5], 4.0)
    assert t.expire(5.0) == [dup.session_id]  # three idle-or-running, two kept: LRU goes
    assert t.expire(14.5) == [a.session_id]
    again = t.acquire("a", None, [1, 2], 15.0)  # after it ended: a new session, a new id
    assert again.first and again.session_id != a.session_id
    t.release(again, [1, 2], 15.0)
    assert t.expire(15.0) == []
    t.release(b, [1, 2], 15.0)
    assert sorted(t.clear_idle()) == sorted([b.session_id, again.session_id]) and len(t) == 0


def test_finish_ends_a_key_at_once_and_a_running_slot_with_its_turn() -> None:
    t = ClientSessions()
    a = t.acquire("k", None, (1,), 0.0)
    b = t.acquire("k", None, (1,), 0.0)
    other = t.acquire("o", None, (1,), 0.0)
    assert t.release(a, (1, 2), 1.0) is None
    assert t.finish("k") == [a.session_id]  # idle: ends now
    assert t.finish("nobody") == []
    assert t.release(b, (1, 3), 2.0) == b.session_id  # it ran: ends with its turn
    assert len(t) == 1 and t.release(other, (1, 4), 2.0) is None
    c = t.acquire("k", None, (1, 2), 3.0)  # the key again: a new session
    assert c.first and c.session_id not in (a.session_id, b.session_id)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from([0, 1, 2]),
                          st.lists(st.integers(0, 3), min_size=1, max_size=6)), max_size=40))
def test_no_slot_is_leased_twice_and_none_is_lost(
        ops: list[tuple[str | None, int, list[int]]]) -> None:
    """Whatever the order of turns, finishes and expiries: no session runs two turns at once,
    and every session id handed out is ended exactly once or still held."""
    t = ClientSessions(ttl_s=5.0, max_sessions=3)
    held: list[Lease] = []
    ended: list[str] = []
    seen: set[str] = set()
    now = 0.0
    for key, op, ids in ops:
        now += 1.0
        if op == 1 and held:
            lease = held.pop(0)
            e = t.release(lease, tuple(ids), now)
            ended += [e] if e is not None else []
        elif op == 2 and key is not None:
            ended += t.finish(key)
            ended += t.expire(now)
        else:
            lease = t.acquire(key, None, tuple(ids), now)
            held.append(lease)
            seen.add(lease.session_id)
        running = [h.session_id for h in held]
        assert len(running) == len(set(running))
        assert t.num_running() == sum(h.key is not None for h in held)
        assert not set(running) & set(ended)
    ended += t.clear_idle()
    assert len(ended) == len(set(ended))
    assert set(ended) | {h.session_id for h in held} == seen
