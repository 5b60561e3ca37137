"""Moves by continuation in the simulator: pieces, chains, exactly-once, whole groups."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from random_plans import random_plan

from plan_helpers import Placement, build_plan
from tailsieve.core.balance_check import plan_check
from tailsieve.core.balance_trace import BalanceTrace
from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.drain import DrainSettings
from tailsieve.core.plan import StepPlan
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.layout import RequestLayout
from tailsieve.sim.movepath import PieceSettings, simulate_with_moves
from tailsieve.sim.replicas import PoolConfigs

MODEL = load_profile("qwen3-4b-h100")


def _lengths(table: dict[str, list[int]]):  # type: ignore[no-untyped-def]
    return lambda pid, step: table[pid]


@settings(max_examples=60, deadline=None)
@given(
    num_replicas=st.integers(2, 4),
    group_size=st.integers(1, 4),
    num_groups=st.integers(1, 10),
    seed=st.integers(0, 2**31 - 1),
    interval_s=st.sampled_from([0.05, 0.5, 3.0]),
    with_prompts=st.booleans(),
    cap=st.sampled_from([None, 2, 5]),
    tight_kv=st.booleans(),
    pieces=st.sampled_from([None, PieceSettings(300, 0.01, defer_moves=False),
                            PieceSettings(1500, 0.0, keeps_running_piece=True),
                            PieceSettings(300, 0.01), PieceSettings.streamed(4)]),
    drain=st.sampled_from([None, DrainSettings(start_fraction=0.5, lengths=(100, 900, 3000)),
                           DrainSettings(lpt=False, priority=True, priority_bucket_tokens=100),
                           DrainSettings(start_fraction=1.0, priority=True)]),
)
def test_moves_keep_exactly_once_whole_groups_and_token_exact_chains(
    num_replicas: int, group_size: int, num_groups: int, seed: int, interval_s: float,
    with_prompts: bool, cap: int | None, tight_kv: bool, pieces: PieceSettings | None,
    drain: DrainSettings | None,
) -> None:
    """Under moves, running caps (queueing), a KV capacity that preempts, and bounded pieces
    (a move drops the running piece, or keeps it as a streamed one does); with the drain's
    LPT moves and engine priority too."""
    rng = np.random.default_rng(seed)
    plan = random_plan(rng, num_replicas, group_size, num_groups, step=2, tail_from=3)
    table = {a.prompt_id: rng.integers(1, 4000, group_size).tolist() for a in plan.assignments}
    prompts = {a.prompt_id: int(rng.integers(0, 500)) for a in plan.assignments}
    ptoks = prompts.__getitem__ if with_prompts else None
    kv = 6000 if tight_kv else None  # one request fits alone (< 4,000 + 500 tokens)
    cfg = ReplicaConfig.from_profile(MODEL, max_num_seqs=cap, kv_capacity_tokens=kv)
    bal = BalanceSettings(interval_s=interval_s, horizon_s=30.0, seam_s=0.01, drain=drain)
    layout = RequestLayout.build(plan, _lengths(table), ptoks)
    configs = [cfg] * num_replicas
    res, stats = simulate_with_moves(layout, configs, plan.num_fresh_to_deliver, bal,
                                     keep_pieces=True, tail_replicas=plan.tail_replicas,
                                     pieces=pieces)
    aborted_groups = layout.fresh & ~res.delivered_fresh
    for i, chain in enumerate(stats.pieces):
        g = i // group_size
        # contiguous pieces from token 0; each piece on the replica the previous one left for
        # (a move that drops the running piece records nothing of it: an aborted response may
        # have no piece, and its first may be elsewhere)
        drops = pieces is not None and not (pieces.keeps_running_piece or pieces.defer_moves)
        if not chain:
            assert drops and aborted_groups[g]
            continue
        assert chain[0][1] == 0
        assert drops or chain[0][0] == layout.request_replica[i]
        for (r0, _, e0), (r1, s1, _) in itertools.pairwise(chain):
            assert s1 == e0 and (r1 != r0 or pieces is not None)
            # moves stay within a pool
            assert (r0 in plan.tail_replicas) == (r1 in plan.tail_replicas)
        if pieces is not None:  # no piece is longer than the cap
            assert all(e - b <= pieces.piece_tokens for _, b, e in chain)
        end = chain[-1][2]
        if aborted_groups[g]:
            assert end <= layout.lengths[i]
            if not np.isfinite(res.done_s[i]):
                assert res.tokens_so_far[i] == end
        else:
            assert end == layout.lengths[i]  # the chain delivers exactly the target length
            assert np.isfinite(res.done_s[i])
    # the executor's outcome: every launched group exactly once, delivered groups whole
    out = SimExecutor(PoolConfigs.single(cfg), pieces=pieces).run(
        dataclasses.replace(plan, balance=bal), _lengths(table), ptoks)
    launched = [a.prompt_id for a in plan.assignments]
    seen = list(out.delivered_ids) + [a.prompt_id for a in out.aborted]
    assert sorted(seen) == sorted(launched)
    assert len(out.delivered) == plan.num_required
    for grp in out.delivered:
        assert grp.response_tokens == tuple(table[grp.prompt_id])
    # tokens a move drops (decoded again elsewhere) are wasted and generated, as aborted ones
    dropped = stats.dropped_tokens
    assert out.wasted_tokens == sum(a.wasted_tokens for a in out.aborted) + dropped
    assert out.generated_tokens == out.wasted_tokens + sum(
        sum(g.response_tokens) for g in out.delivered)
    if pieces is not None and pieces.keeps_running_piece:
        assert dropped <= stats.num_moves * (pieces.stream_interval - 1)


def _skewed_plan() -> tuple[StepPlan, dict[str, list[int]]]:
    # replica 0 holds 6 long responses, replica 1 one short: imbalance to fix by moving
    placements = [Placement(f"a{i}", 0) for i in range(6)] + [Placement("b", 1)]
    plan = build_plan(1, 2, 1, placements)
    table = {f"a{i}": [20_000] for i in range(6)} | {"b": [100]}
    return plan, table


def test_moves_shorten_an_imbalanced_step() -> None:
    plan, table = _skewed_plan()
    cfg = ReplicaConfig.from_profile(MODEL, max_num_seqs=None, kv_capacity_tokens=None)
    ex = SimExecutor(PoolConfigs.single(cfg))
    still = ex.run(plan, _lengths(table))
    bal = BalanceSettings(interval_s=1.0, horizon_s=still.makespan_s, seam_s=0.05)
    moved = ex.run(dataclasses.replace(plan, balance=bal), _lengths(table))
    assert moved.num_moves >= 2
    assert moved.moved_tokens > 0 and moved.prefill_s > 0
    assert moved.makespan_s < 0.9 * still.makespan_s
    assert [g.response_tokens for g in moved.delivered] == [g.response_tokens
                                                            for g in still.delivered]
    assert moved.wasted_tokens == 0


def test_expensive_prefill_stops_moves() -> None:
    plan, table = _skewed_plan()
    cfg = dataclasses.replace(
        ReplicaConfig.from_profile(MODEL, max_num_seqs=None, kv_capacity_tokens=None),
        recompute_s_per_token=1.0,  # a second per prefilled token: no move can pay
    )
    ex = SimExecutor(PoolConfigs.single(cfg))
    still = ex.run(plan, _lengths(table))
    bal = BalanceSettings(interval_s=1.0, horizon_s=still.makespan_s, seam_s=0.05)
    moved = ex.run(dataclasses.replace(plan, balance=bal), _lengths(table))
    assert moved.num_moves == 0
    assert moved.makespan_s == pytest.approx(still.makespan_s, rel=1e-9)


def _one_long_plan(length: int) -> tuple[StepPlan, dict[str, list[int]], ReplicaConfig]:
    plan = build_plan(1, 2, 1, [Placement("a", 0), Placement("b", 1)])
    cfg = ReplicaConfig.from_profile(MODEL, max_num_seqs=None, kv_capacity_tokens=None)
    return plan, {"a": [length], "b": [10]}, cfg


def test_bounded_pieces_cost_their_seams() -> None:
    """A response alone on its replica in pieces of P tokens waits one seam per piece end, its
    prefix cached (free with no per-request prefill): ceil(L / P) - 1 seams more than in one
    go; with free seams the step is the one-piece step."""
    plan, table, cfg = _one_long_plan(1000)
    bal = BalanceSettings(interval_s=1e3, horizon_s=1.0, seam_s=1e3)  # balance, never a move
    one = SimExecutor(PoolConfigs.single(cfg)).run(dataclasses.replace(plan, balance=bal),
                                                    _lengths(table))
    for seam_s, piece in [(0.0, 300), (0.02, 300), (0.02, 128)]:
        ex = SimExecutor(PoolConfigs.single(cfg), pieces=PieceSettings(piece, seam_s))
        out = ex.run(dataclasses.replace(plan, balance=bal), _lengths(table))
        seams = -(-1000 // piece) - 1
        assert out.makespan_s == pytest.approx(one.makespan_s + seams * seam_s, rel=1e-9)
        assert out.num_moves == 0
        assert [g.response_tokens for g in out.delivered] == [(1000,), (10,)]


def test_a_move_drops_the_running_piece_unless_streamed_or_deferred() -> None:
    """Bounded pieces: a move at once continues from the last piece end (the running piece's
    tokens are decoded again); a streamed piece keeps them; a deferred move waits for the piece
    to end. Every way the response is exact; only the first drops tokens."""
    plan, table = _skewed_plan()
    cfg = ReplicaConfig.from_profile(MODEL, max_num_seqs=None, kv_capacity_tokens=None)
    still = SimExecutor(PoolConfigs.single(cfg)).run(plan, _lengths(table))
    bal = BalanceSettings(interval_s=1.0, horizon_s=still.makespan_s, seam_s=0.05)
    res = {}
    for mode in ("drop", "keep", "defer"):
        layout = RequestLayout.build(dataclasses.replace(plan, balance=bal), _lengths(table))
        pieces = PieceSettings(4096, 0.0, keeps_running_piece=mode == "keep",
                               defer_moves=mode == "defer")
        sim, stats = simulate_with_moves(layout, [cfg, cfg], plan.num_fresh_to_deliver, bal,
                                         keep_pieces=True, pieces=pieces)
        assert stats.num_moves >= 1
        assert all(chain[-1][2] == n for chain, n in zip(stats.pieces, layout.lengths,
                                                         strict=True))
        res[mode] = (stats, float(np.max(sim.done_s)))
    assert res["drop"][0].dropped_tokens > 0
    assert res["keep"][0].dropped_tokens == 0 and res["defer"][0].dropped_tokens == 0
    assert res["keep"][1] < still.makespan_s and res["defer"][1] < still.makespan_s
    # deferred moves leave at piece ends only: every piece but the last is a full 4,096
    for chain in res["defer"][0].pieces:
        assert all(e - b == 4096 for _, b, e in chain[:-1])


@pytest.mark.parametrize("pieces", [None, PieceSettings(400, 0.01, defer_moves=False),
                                    PieceSettings(400, 0.01)])
def test_a_run_does_not_depend_on_the_decision_size(
    pieces: PieceSettings | None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every check of a run (queues, cache hits, moves cutting or waiting for pieces): the
    same result with one move per decision as with the whole check in one call."""
    from tailsieve.sim import movepath

    made: list[list[int]] = []  # per check, the moves of each decision

    def spy(*args, **kw):  # type: ignore[no-untyped-def]
        made.append([])
        for decision in plan_check(*args, **kw):
            made[-1].append(len(decision))
            yield decision

    monkeypatch.setattr(movepath, "plan_check", spy)
    rng = np.random.default_rng(3)
    plan = random_plan(rng, 4, 4, 24, step=2, tail_from=3)
    table = {a.prompt_id: rng.integers(1, 6000, 4).tolist() for a in plan.assignments}
    prompts = {a.prompt_id: int(rng.integers(0, 400)) for a in plan.assignments}
    layout = RequestLayout.build(plan, _lengths(table), prompts.__getitem__)
    cfg = ReplicaConfig.from_profile(MODEL, max_num_seqs=20)
    runs = []
    for per in (1, 64):
        bal = BalanceSettings(interval_s=0.5, horizon_s=30.0, seam_s=0.01,
                              max_moves_per_decision=per)
        runs.append(simulate_with_moves(layout, [cfg] * 4, plan.num_fresh_to_deliver, bal,
                                        keep_pieces=True, tail_replicas=plan.tail_replicas,
                                        pieces=pieces))
    (one, s1), (whole, s64) = runs
    assert len(made) == s1.num_checks + s64.num_checks
    assert max(map(len, made[:s1.num_checks])) >= 3  # checks of several decisions
    assert s1 == s64
    np.testing.assert_array_equal(one.done_s, whole.done_s)
    np.testing.assert_array_equal(one.delivered_fresh, whole.delivered_fresh)


@pytest.mark.parametrize(("interval", "generated", "kept"), [
    (1, 0, 0), (1, 37, 37), (16, 0, 0), (16, 1, 1), (16, 16, 1), (16, 17, 17), (16, 40, 33),
])
def test_a_streamed_move_keeps_the_first_token_and_whole_chunks(
    interval: int, generated: int, kept: int
) -> None:
    assert PieceSettings.streamed(interval).kept_on_move(generated) == kept


def test_stream_interval_is_validated() -> None:
    with pytest.raises(ConfigError, match="stream_interval"):
        PieceSettings.streamed(0)


def test_every_check_sees_every_unfinished_response_even_between_pieces() -> None:
    """A response between two pieces (its seam) counts on the replica of its next piece, as the
    live executor sees it: without that, a check at a piece end saw the replica empty and moved
    responses onto it that were about to come back (moves the live rebalancer never makes)."""
    placements = [Placement(f"a{i}", 0) for i in range(4)] + [Placement(f"b{i}", 1)
                                                             for i in range(4)]
    plan = build_plan(1, 2, 1, placements)
    table = {f"a{i}": [600 + 50 * i] for i in range(4)} | {f"b{i}": [900 + 70 * i]
                                                          for i in range(4)}
    cfg = ReplicaConfig.from_profile(MODEL, max_num_seqs=None, kv_capacity_tokens=None)
    bal = BalanceSettings(interval_s=0.05, horizon_s=5.0, seam_s=0.02)
    plan = dataclasses.replace(plan, balance=bal, num_fresh_to_deliver=len(placements))
    layout = RequestLayout.build(plan, _lengths(table))
    trace = BalanceTrace()
    res, stats = simulate_with_moves(layout, [cfg, cfg], len(placements), bal,
                                     pieces=PieceSettings(100, 0.01), trace=trace)
    assert len(trace.checks) >= 5
    for c in trace.checks:
        unfinished = int((res.done_s > c.t_s + 1e-12).sum())
        assert sum(c.num_running) == unfinished, (c.t_s, c.num_running, unfinished)
    assert trace.num_effective == stats.num_moves
