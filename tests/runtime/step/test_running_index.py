"""The running index (``core.running_index``): kept from events, it agrees with reading
every running response at every check, which it replaces."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_live_rebalance import RANDOM_STEPS, random_step

from tailsieve.core.progress_clock import ProgressClock
from tailsieve.core.running_index import RunningIndex
from tailsieve.runtime.step.live_moves import index_of
from tailsieve.runtime.step.rebalancer import LiveRebalancer

R = 3  # replicas

# one event: (kind, key number, replica, tokens)
events = st.lists(
    st.tuples(st.sampled_from(["add", "remove", "move", "known", "start", "start", "end",
                               "check", "check"]),
              st.integers(0, 5), st.integers(0, R - 1), st.integers(0, 400)),
    min_size=5, max_size=60,
)


def _brute(state: dict[int, dict[str, object]], clock: ProgressClock, now: float,
           ) -> dict[int, tuple[int, int]]:
    """Per replica (count, context) by reading every response: the old way."""
    out: dict[int, list[int]] = {}
    for e in state.values():
        n = int(e["known"])  # type: ignore[call-overload]
        piece = e["piece"]
        if piece is not None:
            on, start, cap = piece  # type: ignore[misc]
            n += min(cap, max(0, int(clock.tokens_at(on, now) - clock.tokens_at(on, start))))
        out.setdefault(int(e["replica"]), []).append(n)  # type: ignore[call-overload]
    return {r: (len(v), sum(v)) for r, v in out.items()}


@settings(max_examples=150, deadline=None)
@given(evs=events, rates=st.lists(st.floats(0.0, 500.0), min_size=R, max_size=R))
def test_index_agrees_with_reading_every_response(evs: list[tuple[str, int, int, int]],
                                                  rates: list[float]) -> None:
    """Random events between checks; at each check (the clock closed at it, then new rates,
    as the rebalancer does) the sums are the per-response estimates within one token each,
    and each replica's responses are exactly what reading them gives."""
    idx = RunningIndex()
    clock = ProgressClock()
    state: dict[int, dict[str, object]] = {}
    now = 0.0
    evs = [("add", k, k % R, 10 * k) for k in range(6)] + evs  # everyone running at first
    for kind, k, r, n in evs:
        key = ("p", k)
        now += 0.05
        if kind == "add":
            idx.add(key, r, n, n, (r,))
            state[k] = {"replica": r, "known": n, "piece": None}
        elif k not in state:
            continue
        elif kind == "remove":
            idx.remove(key)
            del state[k]
        elif kind == "move":
            idx.set_replica(key, r)
            state[k]["replica"] = r
        elif kind == "known":
            idx.set_known(key, n, 0)
            state[k]["known"] = n
        elif kind == "start":  # caps small enough to be reached
            idx.piece_started(key, None, r, now, n // 10)
            state[k]["piece"] = (r, now, n // 10)
        elif kind == "end":
            idx.piece_ended(key, n, 0)
            state[k].update(known=n, piece=None)
        if kind == "check" or (kind == "add" and k % 2):
            clock.catch_up(now, lambda r=r: {j: rates[j] for j in range(R) if j != r})  # one unseen
            got = idx.sums(clock, now)
            want = _brute(state, clock, now)
            assert got.keys() == want.keys()
            for j, (cnt, ctx) in want.items():
                assert got[j][0] == cnt
                assert ctx - 1e-6 <= got[j][1] <= ctx + cnt + 1e-6  # not rounded down
                exact = sorted(idx.running_on(j, clock, now))
                assert [c for _, c in exact] == [c for _, c in sorted(
                    (("p", kk), c) for kk, c in _each(state, clock, now, j))]
            clock.run_at({j: rates[(j + len(evs)) % R] for j in range(R)})


def _each(state: dict[int, dict[str, object]], clock: ProgressClock, now: float, replica: int,
          ) -> Iterator[tuple[int, int]]:
    for k, e in state.items():
        if e["replica"] != replica:
            continue
        n = int(e["known"])  # type: ignore[call-overload]
        if e["piece"] is not None:
            on, start, cap = e["piece"]  # type: ignore[misc]
            n += min(cap, max(0, int(clock.tokens_at(on, now) - clock.tokens_at(on, start))))
        yield k, n


def test_an_owner_that_stopped_reports_nothing() -> None:
    idx = RunningIndex()
    old, new = object(), object()
    idx.add(("g", 0), 0, 10, 10, (0,), old)
    idx.add(("g", 0), 1, 5, 5, (1,), new)  # the group launched again (regenerated)
    idx.set_known(("g", 0), 999, 10, old)  # the old attempt's late event: ignored
    idx.drop_owner(old)
    assert idx.sums() == {1: (1, 5.0)}
    idx.drop_owner(new)
    assert idx.sums() == {}


@contextlib.contextmanager
def index_checked() -> Iterator[list[int]]:
    """Every check of a live step also reads every running response (``running_responses``)
    and asserts the executor's index agrees."""
    loads = LiveRebalancer.loads
    checked = [0]

    def checking(self: LiveRebalancer, now_s: float | None = None) -> object:
        out = loads(self, now_s)
        if now_s is not None:
            idx = self.executor.running_index()  # type: ignore[attr-defined]
            scan = index_of(self.executor.running_responses(now_s), now_s)  # same instant
            got, want = idx.sums(self.progress, now_s), scan.sums(self.progress, now_s)
            assert got.keys() == want.keys()
            for r, (n, ctx) in want.items():
                assert got[r][0] == n and ctx - 1e-6 <= got[r][1] <= ctx + n + 1e-6
                a, b = sorted(idx.running_on(r, self.progress, now_s)), sorted(
                    scan.running_on(r, self.progress, now_s))
                assert [k for k, _ in a] == [k for k, _ in b]
                assert a == b  # read at the same instant: exactly equal
            checked[0] += 1
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LiveRebalancer, "loads", checking)
        yield checked


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RANDOM_STEPS)
def test_live_index_agrees_with_the_running_responses_at_every_check(
    lengths: list[int], piece: int | None, stream: bool, cut: int | None
) -> None:
    with index_checked() as checked:
        ex = random_step(lengths, piece, stream, cut, interval=0.002)
    assert checked[0] == ex.last_moves.num_checks
