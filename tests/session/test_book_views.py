"""SessionBook's incremental views: the table it keeps equals the views built from scratch,
and ``place_turn`` decides the same on both, over random event sequences."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from session_helpers import grounded_config

from tailsieve.errors import ReplicaError
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.priced import place_turn
from tailsieve.session.replica_view import ReplicaView, ViewTable
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

CONFIG = grounded_config()
N = 4
# two replicas with a small KV budget, so turns beyond it count as waiting
CONFIGS = [CONFIG, replace(CONFIG, kv_capacity_tokens=12_000), CONFIG,
           replace(CONFIG, kv_capacity_tokens=20_000)]
ARRAYS = ("b", "tool", "c", "tool_c", "lag_s", "kv", "k", "pre", "healthy")

pick = st.integers(0, 15)  # which session of those the event applies to (modulo)
rep = st.integers(0, N - 1)
events = st.one_of(
    st.tuples(st.just("request"), pick, st.integers(1, 9_000), st.integers(0, 3)),
    st.tuples(st.just("start"), pick, rep),
    st.tuples(st.just("progress"), pick, st.integers(0, 4_000)),
    st.tuples(st.just("move"), pick, rep),
    st.tuples(st.just("end_turn"), pick, st.integers(0, 3_000)),
    st.tuples(st.just("end_session"), pick),
    st.tuples(st.just("health"), rep, st.booleans()),
    st.tuples(st.just("speeds"), st.lists(st.floats(0.5, 2.0), min_size=N, max_size=N)),
    st.tuples(st.just("check"), st.floats(0.0, 50.0), st.sampled_from([None, *range(N)]),
              st.integers(100, 9_000)),
)


class _Driver:
    """Applies events to a book, each to a session in the state it needs (a new or idle one
    is requested, a requested one starts, a running one progresses, moves or ends)."""

    def __init__(self, book: SessionBook) -> None:
        self.book = book
        self.requested: list[int] = []
        self.running: dict[int, int] = {}  # session -> tokens generated so far
        self.idle: list[int] = []
        self.next_id = 0

    def apply(self, ev: tuple[Any, ...], now_s: float) -> None:
        b, kind = self.book, ev[0]
        if kind == "request":
            if self.idle and ev[1] % 2:
                s = self.idle.pop(ev[1] % len(self.idle))
            else:
                s, self.next_id = self.next_id, self.next_id + 1
            b.request(s, s // 3, ev[2] + b.cached(s, 0), prompt_tokens=min(ev[3] * 100, ev[2]))
            self.requested.append(s)
        elif kind == "start" and self.requested:
            s = self.requested.pop(ev[1] % len(self.requested))
            b.start_turn(s, ev[2], now_s)
            self.running[s] = 0
        elif kind in ("progress", "move", "end_turn") and self.running:
            s = list(self.running)[ev[1] % len(self.running)]
            if kind == "progress":
                self.running[s] += ev[2]
                b.progress(s, self.running[s], now_s)
            elif kind == "move":
                b.move_turn(s, ev[2], now_s)
            else:
                b.end_turn(s, self.running.pop(s) + ev[2], now_s)
                self.idle.append(s)
        elif kind == "end_session" and (self.idle or self.running):
            pool = self.idle + list(self.running)
            s = pool[ev[1] % len(pool)]
            b.end_session(s)
            self.running.pop(s, None)
            if s in self.idle:
                self.idle.remove(s)
        elif kind == "health":
            b.set_healthy(ev[1], ev[2])
        elif kind == "speeds" and ev[1][0] < 0.6:  # rarely: a refit rebuilds every view
            b.set_throughput(CONFIG.throughput, ev[1])


def _scratch(book: SessionBook) -> list[ReplicaView]:
    """The views built from scratch, every replica anew (as before the table was kept)."""
    return [book._view(r, state) for r, state in enumerate(book._reps)]


def _place(turn: TurnRequest, views: list[ReplicaView]) -> Any:
    try:
        return place_turn(turn, views, SessionSettings(move_margin=1.0), 5.0,
                          expected_turn_tokens=300.0)
    except ReplicaError as exc:
        return str(exc)


@settings(max_examples=150, deadline=None)
@given(st.lists(events, min_size=20, max_size=80))
def test_incremental_views_equal_views_from_scratch(seq: list[tuple[Any, ...]]) -> None:
    book = SessionBook(CONFIGS, PrefixCacheModel([c.kv_capacity_tokens for c in CONFIGS]))
    driver = _Driver(book)
    now = 0.0
    for ev in [*seq, ("check", 1.0, None, 500)]:
        now += 0.5
        if ev[0] != "check":
            driver.apply(ev, now)
            continue
        now += ev[1]
        got = book.views(now)  # lapses tool waits first, as the scratch views see them
        want = _scratch(book)
        assert list(got) == want
        fresh = ViewTable(want)
        for name in ARRAYS:
            np.testing.assert_array_equal(getattr(got, name), getattr(fresh, name), name)
        ctx = ev[3]
        turn = TurnRequest("x", None, 1 if ev[2] is not None else 0, ctx,
                           ctx // 3 if ev[2] is not None else ctx, ev[2],
                           {r: ctx // (r + 2) for r in range(N)})
        assert _place(turn, got) == _place(turn, want)  # the table path and the list path


def test_views_change_only_with_events() -> None:
    """The table is kept between calls: a replica no event touched keeps its view object."""
    book = SessionBook(CONFIGS, PrefixCacheModel([c.kv_capacity_tokens for c in CONFIGS]))
    first = list(book.views(0.0))
    book.request("a", None, 1_000)
    book.start_turn("a", 2, 0.0)
    table = book.views(1.0)
    assert [table[r] is first[r] for r in range(N)] == [True, True, False, True]
    assert table[2].num_running == 1 and table.b[2] == 1.0
