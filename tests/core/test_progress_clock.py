"""Where a running response stands without streaming: the progress clock and its use by the
live rebalancer."""

from __future__ import annotations

import asyncio
import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.progress_clock import ProgressClock
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.step.live_moves import LiveResponse
from tailsieve.runtime.step.rebalancer import LiveRebalancer


def _brute(segments: list[tuple[float, float]], t: float) -> float:
    """Tokens by ``t`` for rates held over consecutive ``(duration, rate)`` segments from 0."""
    got, start = 0.0, 0.0
    for dur, rate in segments:
        got += max(0.0, min(t, start + dur) - start) * rate
        start += dur
    if t > start and segments:
        got += (t - start) * segments[-1][1]
    return got


@given(
    steps=st.lists(st.tuples(st.floats(0.01, 5.0), st.floats(0.0, 200.0)), min_size=1,
                   max_size=12),
    probe=st.floats(0.0, 1.0),
)
def test_tokens_integrate_each_interval_at_the_rate_that_opened_it(
    steps: list[tuple[float, float]], probe: float
) -> None:
    clock = ProgressClock()
    now = 0.0
    for dur, rate in steps:  # rate ``rate`` from ``now``, then close at ``now + dur``
        clock.run_at({0: rate})
        now += dur
        clock.close(now)
    t = probe * now
    assert abs(clock.tokens_at(0, t) - _brute(steps, t)) <= 1e-6 * (1 + _brute(steps, now))
    assert clock.tokens_at(0, now) - clock.tokens_at(0, t) >= 0
    assert clock.tokens_at(1, now) == 0.0  # a replica never seen


def test_a_replica_first_seen_later_ran_at_its_first_rate_from_the_start() -> None:
    clock = ProgressClock()
    clock.run_at({0: 10.0})
    clock.close(2.0)
    clock.run_at({0: 10.0, 1: 4.0})
    clock.close(3.0)
    assert clock.tokens_at(1, 3.0) == 12.0
    assert clock.tokens_at(0, 3.0) - clock.tokens_at(0, 1.0) == 20.0
    assert clock.tokens_at(0, 2.5) == 25.0  # interpolated inside the last interval


@given(cap=st.integers(0, 500), start=st.floats(0.0, 9.0), rate=st.floats(0.0, 100.0))
def test_a_piece_s_tokens_are_whole_and_at_most_its_cap(cap: int, start: float,
                                                          rate: float) -> None:
    clock = ProgressClock()
    clock.catch_up(10.0, lambda: {0: rate})
    got, ran = clock.piece_tokens(0, start, 10.0, cap), (10.0 - start) * rate
    assert 0 <= got <= cap
    assert got == cap if ran >= cap + 1e-6 else ran - 1 - 1e-6 <= got <= ran + 1e-6


def test_forgetting_the_history_keeps_the_counts_after_it() -> None:
    clock, kept = ProgressClock(), ProgressClock()
    for c in (clock, kept):
        for k, rate in enumerate((10.0, 30.0, 5.0, 20.0)):
            c.run_at({0: rate})
            c.close(float(k + 1))
    clock.forget_before(2.5)
    for t in (2.5, 3.0, 3.7, 6.0):
        assert abs(clock.tokens_at(0, t) - kept.tokens_at(0, t)) <= 1e-9
    assert clock.piece_tokens(0, 2.5, 4.0, 1000) == kept.piece_tokens(0, 2.5, 4.0, 1000)


class _Running:
    """A ``Mover`` with fixed running responses that records moves."""

    def __init__(self, running: list[LiveResponse]) -> None:
        self.running = running
        self.moves: list[tuple[str, int, int]] = []

    def running_responses(self) -> list[LiveResponse]:
        return self.running

    def move(self, prompt_id: str, sample: int, to_replica: int) -> bool:
        self.moves.append((prompt_id, sample, to_replica))
        return True


# 10 ms per iteration whatever the batch: 100 tokens per second per running response
FLAT = ReplicaConfig(throughput=ThroughputModel.from_pairs([(1, 0.01), (64, 0.01)], name="f"),
                     recompute_s_per_token=1e-6)
# batch-bound with a context term: a long context makes its replica the costlier
CONTEXT = ReplicaConfig(
    throughput=dataclasses.replace(ThroughputModel.from_pairs([(1, 0.01), (64, 0.073)], name="k"),
                                   context_s_per_token=1e-5),
    recompute_s_per_token=1e-7,
)


def _rebalancer(running: list[LiveResponse], now: list[float], estimate: bool = True,
                cost: ReplicaConfig = FLAT, replicas: int = 2) -> LiveRebalancer:
    return LiveRebalancer(
        _Running(running), BalanceSettings(interval_s=0.5, horizon_s=10.0, seam_s=0.0),
        [cost] * replicas, lambda: [True] * replicas, lambda: now[0], estimate=estimate,
    )


def test_an_unstreamed_piece_counts_the_tokens_the_cost_model_says_it_generated() -> None:
    running = [
        LiveResponse("a", 0, 0, 20, 20, (0,), 0, (0, 2.0, 1000)),  # ran 2 s on replica 0
        LiveResponse("a", 1, 0, 20, 20, (0,), 0, (0, 2.0, 150)),  # the same, capped at 150
        LiveResponse("b", 0, 1, 50, 20, (1,), 0, None),  # streamed / between pieces: as known
    ]
    now = [2.0]
    rb = _rebalancer(running, now)
    loads = rb._estimated_loads(2.0)
    assert [ld.context_tokens for ld in loads] == [20 + 200 + 20 + 150, 50]
    now[0] = 3.0  # one second more at 100 tokens per second (ages as the executor reports)
    rb.executor.running = [x._replace(piece=(0, 3.0, x.piece[2])) if x.piece else x  # type: ignore[attr-defined]
                           for x in running]
    loads = rb._estimated_loads(3.0)
    assert loads[0].context_tokens == 20 + 300 + 20 + 150
    plain = _rebalancer(running, [2.0], estimate=False)._estimated_loads(2.0)
    assert [ld.context_tokens for ld in plain] == [40, 50]  # what the executor knows


def test_estimated_progress_is_what_shows_the_imbalance() -> None:
    """Replica 0's two responses have run 20 s unstreamed (about 2,000 tokens each at 100
    tokens per second); replica 1's two are fresh. By count the replicas are alike; with the
    context term the estimate shows replica 0 the costlier, and only then is one moved."""
    running = [LiveResponse("a", i, 0, 10, 10, (0,), 0, (0, 20.0, 5000)) for i in range(2)]
    running += [LiveResponse("b", i, 1, 10, 10, (1,), 0, None) for i in range(2)]
    moved = {}
    for estimate in (True, False):
        rb = _rebalancer(running, [20.0], estimate, CONTEXT)
        moved[estimate] = rb.check()
        if estimate:
            assert rb.executor.moves and rb.executor.moves[0][0] == "a"  # type: ignore[attr-defined]
            assert rb.tally.moved_tokens > 1000  # the prefix carries the estimated tokens
    assert moved[True] >= 1 and moved[False] == 0


def test_a_check_in_decisions_makes_the_same_moves_as_one_call() -> None:
    """``check_async`` lets the event loop run between decisions of at most 2 moves; with
    nothing changing meanwhile it makes exactly ``check``'s moves."""
    running = [LiveResponse("a", i, 0, 10 + 50 * i, 10, (0,), 0, (0, 5.0, 5000))
               for i in range(9)]
    running += [LiveResponse("b", 0, 1, 10, 10, (1,), 0, None)]
    made = []
    for use_async in (False, True):
        rb = _rebalancer(running, [5.0], cost=CONTEXT, replicas=3)
        n = asyncio.run(rb.check_async()) if use_async else rb.check()
        assert n == len(rb.executor.moves) >= 3  # type: ignore[attr-defined]
        made.append(rb.executor.moves)  # type: ignore[attr-defined]
    assert made[0] == made[1]


def test_a_response_waiting_on_a_move_is_not_moved_back() -> None:
    """A vLLM piece moves at its end: until then the response counts on its destination but is
    not a candidate (as the simulator's deferred moves), so a later check cannot undo the move
    before it took effect."""
    running = [
        LiveResponse("a", 0, 1, 20, 20, (0,), 0, (0, 1.0, 1000)),  # moved 0 -> 1, piece on 0
        LiveResponse("a", 1, 1, 20, 20, (0,), 0, (1, 1.0, 1000)),  # runs where it counts
        LiveResponse("b", 0, 0, 20, 20, (0,), 0, (0, 1.0, 1000)),
    ]
    rb = _rebalancer(running, [1.0])
    loads = rb._estimated_loads(1.0)
    assert [ld.num_running for ld in loads] == [1, 2]  # counted where it is going
    assert [k for k, _ in loads[1].running()] == [("a", 1)]
    assert [k for k, _ in loads[0].running()] == [("b", 0)]
