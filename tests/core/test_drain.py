"""The single-turn drain: expected remaining work, the LPT rule, engine priority."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import islice

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.drain import DrainSettings, RemainingModel, engine_priority
from tailsieve.core.drain_plan import drain_decisions, iter_drain
from tailsieve.core.replica_load import ReplicaLoad
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine

CFG = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"), max_num_seqs=None,
                                 kv_capacity_tokens=None)
TAUS = CFG.throughput.taus(256).tolist()
K = CFG.throughput.context_s_per_token
PER_TOKEN = CFG.recompute_cost_s(1) - CFG.prefill_s


def finish_time_s(items: Sequence[tuple[float, float]], tau: Callable[[int], float],
                  k: float) -> float:
    """The reference: seconds until the last of ``items`` (``(context tokens, remaining
    tokens)``) finishes when all run together on one replica: ``sum_j r_(j) (tau(j) -
    tau(j-1))`` over the remaining lengths in descending order, plus the context term ``k
    sum_i (x_i r_i + r_i^2 / 2)``."""
    rems = sorted((r for _, r in items), reverse=True)
    t, prev = 0.0, 0.0
    for j, r in enumerate(rems, 1):
        tj = tau(j)
        t += r * (tj - prev)
        prev = tj
    return t + k * sum(x * r + r * r / 2.0 for x, r in items)


def test_expected_remaining_is_the_conditional_mean_over_longer_lengths() -> None:
    m = RemainingModel([1, 2, 3, 10])
    got = m.expected_many([2.5, 0, 20]).tolist()
    assert got[0] == pytest.approx((3 + 10) / 2 - 2.5)
    assert got[1] == pytest.approx(4.0)
    assert got[2] == 20.0  # past every sample: as long again as it has run
    assert RemainingModel([]).expected_many([0, 3]).tolist() == [1.0, 3.0]


def test_on_a_heavy_tail_the_longer_running_response_is_expected_to_run_longer() -> None:
    lengths = np.random.default_rng(0).lognormal(7.0, 1.0, 2000).astype(int).tolist()
    m = RemainingModel(lengths)
    at_5000, at_1000, at_100 = m.expected_many([5000, 1000, 100])
    assert at_5000 > at_1000 > at_100


def test_engine_priority_puts_the_longest_running_first() -> None:
    assert engine_priority(0) == 0
    assert engine_priority(511) == 0
    assert engine_priority(512) == -1
    assert engine_priority(5000, 1000) == -5
    assert engine_priority(-3) == 0


def test_drain_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="start_fraction"):
        DrainSettings(start_fraction=1.5)
    with pytest.raises(ConfigError, match="priority_bucket_tokens"):
        DrainSettings(priority_bucket_tokens=0)
    with pytest.raises(ConfigError, match="lengths"):
        DrainSettings(lengths=(3, -1))
    d = DrainSettings(start_fraction=0.25)
    assert d.drains(25, 100) and not d.drains(26, 100)
    assert not DrainSettings(lpt=False).drains(0, 100)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 600)), min_size=1, max_size=6))
def test_finish_time_matches_the_replica_engine(items: list[tuple[int, int]]) -> None:
    """The closed form against the event-driven engine (prompts cached: no prefill)."""
    e = ReplicaEngine(CFG)
    for i, (x, r) in enumerate(items):
        e.submit(i, r, x, cached_tokens=x)
    last = max(c.time_s for c in e.advance(1e9))
    assert finish_time_s([(float(x), float(r)) for x, r in items], TAUS.__getitem__, K) == \
        pytest.approx(last, rel=1e-6)


def _load(r: int, items: list[tuple[tuple[int, int], int]], accepts: bool = True,
          pool: int = 0) -> ReplicaLoad:
    return ReplicaLoad.of(r, items, TAUS.__getitem__, K, PER_TOKEN, accepts=accepts, pool=pool)


def test_the_longest_expected_response_goes_to_the_replica_expected_to_finish_first() -> None:
    """Replica 0 holds a response 8,000 tokens in among short new ones; replica 1 is nearly
    idle. The move that shortens the expected step most takes the long-running response
    to replica 1: that is what the balancer's equal cost per token does not do."""
    prompt = 200
    model = RemainingModel([500] * 90 + [16_000] * 10)
    loads = [_load(0, [((0, 0), prompt + 8000)] + [((i, 0), prompt + 300) for i in range(1, 5)]),
             _load(1, [((9, 0), prompt + 300)] * 1)]
    moves = list(iter_drain(loads, lambda run: model.expected_many([x - prompt for _, x in run]),
                            seam_s=0.05))
    assert moves and moves[0].key == (0, 0) and (moves[0].src, moves[0].dst) == (0, 1)
    assert moves[0].predicted_gain_s > 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num_replicas=st.integers(1, 5),
       max_moves=st.integers(0, 8))
def test_drain_moves_never_raise_the_longest_expected_finish(
        seed: int, num_replicas: int, max_moves: int) -> None:
    """Each key at most once, within its pool, never to a replica that accepts none, and the
    largest expected finish time (the move's price included) never goes up."""
    rng = np.random.default_rng(seed)
    loads, rems = [], {}
    for r in range(num_replicas):
        items = []
        for j in range(int(rng.integers(0, 5))):
            key = (r, j)
            items.append((key, int(rng.integers(50, 20_000))))
            rems[key] = float(rng.integers(1, 10_000))
        loads.append(_load(r, items, accepts=bool(rng.random() < 0.8), pool=int(rng.random() < 0.3)))

    def remaining(run: Sequence[tuple[Hashable, int]]) -> list[float]:
        return [rems[key] for key, _ in run]  # type: ignore[index]

    def worst(where: dict[object, int]) -> float:
        return max((finish_time_s([(float(x), rems[k]) for ld in loads for k, x in ld.running()
                                   if where[k] == r], TAUS.__getitem__, K)
                    for r in range(num_replicas)), default=0.0)

    where = {k: ld.replica for ld in loads for k, _ in ld.running()}
    before = worst(where)
    moves = list(islice(iter_drain(loads, remaining, seam_s=0.05), max_moves))
    assert len(moves) <= max_moves
    assert len({m.key for m in moves}) == len(moves)
    for m in moves:
        assert where[m.key] == m.src and loads[m.dst].accepts
        assert loads[m.src].pool == loads[m.dst].pool
        where[m.key] = m.dst
    assert worst(where) <= before + 1e-9


def test_priority_keeps_the_long_running_continuation_from_being_preempted() -> None:
    """On a replica whose KV cache fills, FCFS preempts the newest request: a continuation
    8,000 tokens in, moved there last. Submitted with ``engine_priority`` under the priority
    policy, the fresh request goes back to the queue instead."""
    cfg = ReplicaConfig.from_profile(load_profile("qwen3-4b-h100"), max_num_seqs=None,
                                     kv_capacity_tokens=12_000)
    waiting = {}
    for policy in (False, True):
        e = ReplicaEngine(cfg, priority=policy)
        e.submit("fresh", 5000, 200)
        e.submit("moved", 3000, 8200, continuation=True,
                 priority=engine_priority(8000) if policy else 0)
        e.advance(12.0)  # past the overflow (about 1,800 tokens in), before either finishes
        assert e.num_preemptions == 1 and e.num_waiting == 1
        running = {rid for rid, _ in e.running_contexts()}
        waiting[policy] = ({"fresh", "moved"} - running).pop()
    assert waiting == {False: "moved", True: "fresh"}


def test_drain_decisions_read_expected_remaining_from_context_less_prompt() -> None:
    """What every executor asks in the drain: ``iter_drain`` over ``settings.drain``'s
    sample, each response's tokens so far being its context less its prompt, in decisions
    of at most ``max_moves_per_decision`` moves, every one full but the last."""

    prompt = 200
    lengths = (500,) * 90 + (16_000,) * 10
    settings = BalanceSettings(interval_s=1.0, horizon_s=10.0, seam_s=0.05,
                               max_moves_per_decision=1, drain=DrainSettings(lengths=lengths))
    loads = [_load(0, [((i, 0), prompt + 8000) for i in range(3)]),
             _load(1, []), _load(2, [])]
    model = RemainingModel(lengths)
    decisions = list(drain_decisions(loads, settings, lambda key: prompt))
    want = list(iter_drain(loads, lambda run: model.expected_many([x - prompt for _, x in run]),
                           0.05))
    assert len(want) >= 2
    assert [mv for d in decisions for mv in d] == want
    assert all(len(d) == 1 for d in decisions[:-1]) and len(decisions[-1]) <= 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 5000)), max_size=8),
       st.integers(0, 20_000), st.integers(1, 5000), st.data())
def test_finish_time_with_or_without_one_response_matches_the_closed_form(
        items: list[tuple[int, int]], x: int, r: int, data: st.DataObject) -> None:
    """The planner's prefix sums against ``finish_time_s`` recomputed from scratch."""
    from tailsieve.core.drain_plan import _Finish

    three = [((i, 0), float(a), float(b)) for i, (a, b) in enumerate(items)]
    f = _Finish(_load(0, []), three)
    pairs = [(a, b) for _, a, b in three]
    close = pytest.approx(finish_time_s([*pairs, (x, r)], TAUS.__getitem__, K), rel=1e-9)
    assert f.with_(float(x), float(r)) == close
    if items:
        j = data.draw(st.integers(0, len(items) - 1))
        rest = pairs[:j] + pairs[j + 1:]
        assert f.without(*pairs[j]) == pytest.approx(
            finish_time_s(rest, TAUS.__getitem__, K), rel=1e-9, abs=1e-12)


def test_the_drain_never_begins_with_nothing_running() -> None:
    """At start_fraction 0 the drain would begin once nothing runs: nothing is left to move."""
    d = DrainSettings(lpt=True, start_fraction=0.0)
    assert not d.drains(0, 100) and not d.drains(1, 100)
    assert DrainSettings(lpt=True, start_fraction=1.0).drains(100, 100)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 5000)), max_size=6),
                min_size=1, max_size=5), st.lists(st.booleans(), min_size=5, max_size=5))
def test_every_replicas_finish_time_at_once_is_the_one_replica_sum_to_the_bit(
        per_replica: list[list[tuple[int, int]]], other_model: list[bool]) -> None:
    """``_finish_times`` (vectorised, all replicas at once, cost models mixed) against
    ``_Finish`` (one replica, the planner's own sums): the same floats, so the drain makes the
    same moves whichever computed a replica's time."""
    from tailsieve.core.drain_plan import _Finish, _finish_times

    taus2 = [2.0 * t for t in TAUS]
    loads = [ReplicaLoad.of(r, [((r, j), x) for j, (x, _) in enumerate(items)],
                            taus2.__getitem__ if other_model[r] else TAUS.__getitem__,
                            K * (1 + r), PER_TOKEN) for r, items in enumerate(per_replica)]
    flat = [(float(x), float(rem)) for items in per_replica for x, rem in items]
    got = _finish_times(loads, [len(items) for items in per_replica],
                        np.asarray([x for x, _ in flat]), np.asarray([r for _, r in flat]))
    want = [_Finish(ld, [(j, float(x), float(rem)) for j, (x, rem) in enumerate(items)]).time_s
            for ld, items in zip(loads, per_replica, strict=True)]
    assert got == want
