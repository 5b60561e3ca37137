"""SimExecutor semantics on hand-computed tiny cases and against the event engine."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from random_plans import random_plan

from plan_helpers import Placement, build_plan
from tailsieve.core.plan import StepPlan
from tailsieve.core.pool import Pool
from tailsieve.errors import ProtocolError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.replicas import PoolConfigs

# tau(b) = b seconds: easy to compute by hand.
LINEAR = ThroughputModel.from_pairs([(b, float(b)) for b in range(1, 9)], name="linear")


def _lengths(table: dict[str, list[int]]):  # type: ignore[no-untyped-def]
    return lambda pid, step: table[pid]


def _both(pools: PoolConfigs) -> list[SimExecutor]:
    return [SimExecutor(pools), SimExecutor(pools, force_event_driven=True)]


@pytest.mark.parametrize("ex", _both(PoolConfigs.single(ReplicaConfig(LINEAR))))
def test_cutoff_count_and_abort_evidence(ex: SimExecutor) -> None:
    plan = build_plan(0, 1, 1, [Placement("a", 0), Placement("b", 0), Placement("c", 0)],
                      num_fresh_to_deliver=2)
    out = ex.run(plan, _lengths({"a": [1], "b": [2], "c": [3]}))
    # 3 running: a done at 1*tau(3) = 3; then b one more token at tau(2): 5.
    assert out.delivered_ids == ("a", "b")
    assert out.bulk_cut_s == pytest.approx(5.0)
    assert out.makespan_s == pytest.approx(5.0)
    assert out.tail_time_s == 0.0
    (c,) = out.aborted
    assert (c.prompt_id, c.num_finished, c.finished_tokens, c.tokens_so_far) == ("c", 0, 0, 2)
    assert c.wasted_tokens == 2 and out.wasted_tokens == 2
    assert out.generated_tokens == 1 + 2 + 2


@pytest.mark.parametrize("ex", _both(PoolConfigs.single(ReplicaConfig(LINEAR))))
def test_pinned_never_aborted_and_speeds_up_after_cutoff(ex: SimExecutor) -> None:
    plan = build_plan(1, 1, 1, [Placement("p", 0, pinned=True), Placement("a", 0),
                                Placement("b", 0)], num_fresh_to_deliver=1)
    out = ex.run(plan, _lengths({"p": [10], "a": [1], "b": [5]}))
    # a done at 3 (tau(3)); b aborted with 1 token; p alone: 9 tokens at tau(1) -> 12.
    assert set(out.delivered_ids) == {"p", "a"}
    assert [g.prompt_id for g in out.aborted] == ["b"]
    assert out.aborted[0].tokens_so_far == 1
    assert out.bulk_cut_s == pytest.approx(12.0)
    assert out.makespan_s == pytest.approx(12.0)


@pytest.mark.parametrize("ex", _both(PoolConfigs.single(ReplicaConfig(LINEAR))))
def test_tail_pool_and_partial_group_evidence(ex: SimExecutor) -> None:
    plan = build_plan(2, 2, 2, [Placement("a", 0), Placement("b", 0),
                                Placement("t", 1, Pool.TAIL)], num_fresh_to_deliver=1)
    out = ex.run(plan, _lengths({"a": [1, 1], "b": [1, 6], "t": [3, 3]}))
    # replica 0: 4 running, tau(4) = 4: a (and b's first response) done at 4 -> cutoff 4.
    assert out.bulk_cut_s == pytest.approx(4.0)
    (b,) = out.aborted
    assert (b.num_finished, b.finished_tokens, b.tokens_so_far, b.wasted_tokens) == (1, 1, 1, 2)
    # tail replica: 2 running, 3 tokens at tau(2) = 2 -> 6.
    assert out.tail_time_s == pytest.approx(6.0)
    assert out.makespan_s == pytest.approx(6.0)
    tail = next(g for g in out.delivered if g.prompt_id == "t")
    assert tail.pool is Pool.TAIL and tail.response_tokens == (3, 3)


@pytest.mark.parametrize("ex", _both(PoolConfigs.single(ReplicaConfig(LINEAR))))
def test_ties_at_cutoff_go_by_plan_order(ex: SimExecutor) -> None:
    plan = build_plan(0, 2, 1, [Placement("x", 0), Placement("y", 1)], num_fresh_to_deliver=1)
    out = ex.run(plan, _lengths({"x": [4], "y": [4]}))
    assert out.delivered_ids == ("x",)
    (y,) = out.aborted
    assert (y.prompt_id, y.num_finished, y.tokens_so_far, y.wasted_tokens) == ("y", 1, 0, 4)
    assert len(out.delivered) + len(out.aborted) == plan.num_launched


def test_capped_queueing_fcfs() -> None:
    ex = SimExecutor(PoolConfigs.single(ReplicaConfig(LINEAR, max_num_seqs=1)))
    plan = build_plan(0, 1, 1, [Placement("a", 0), Placement("b", 0)])
    out = ex.run(plan, _lengths({"a": [2], "b": [3]}))
    assert [g.completion_s for g in out.delivered] == pytest.approx([2.0, 5.0])
    plan1 = build_plan(0, 1, 1, [Placement("a", 0), Placement("b", 0)], num_fresh_to_deliver=1)
    out1 = ex.run(plan1, _lengths({"a": [2], "b": [3]}))
    assert out1.makespan_s == pytest.approx(2.0)
    assert out1.aborted[0].tokens_so_far == 0  # still waiting at the cutoff


def test_prefill_delays_start() -> None:
    ex = SimExecutor(PoolConfigs.single(ReplicaConfig(LINEAR, prefill_s=0.5)))
    out = ex.run(build_plan(0, 1, 1, [Placement("a", 0)]), _lengths({"a": [2]}))
    assert out.makespan_s == pytest.approx(2.5)


def test_speculative_tail_config_shortens_tail_time() -> None:
    base = ReplicaConfig(load_profile("illustrative-flat"))
    plan = build_plan(0, 2, 4, [Placement("a", 0), Placement("t", 1, Pool.TAIL)])
    lens = _lengths({"a": [100, 100, 100, 100], "t": [5000, 4000, 3000, 2000]})
    plain = SimExecutor(PoolConfigs.from_specs(base)).run(plan, lens)
    spec = SimExecutor(PoolConfigs.from_specs(base, tail_spec=SpecConfig.parse("mtp:3")))
    fast = spec.run(plan, lens)
    assert fast.tail_time_s < 0.7 * plain.tail_time_s
    assert fast.bulk_cut_s == pytest.approx(plain.bulk_cut_s)  # bulk pool untouched


def test_too_few_fresh_groups_is_an_error() -> None:
    ex = SimExecutor(PoolConfigs.single(ReplicaConfig(LINEAR)))
    plan = build_plan(0, 1, 1, [Placement("a", 0)], num_fresh_to_deliver=2)
    with pytest.raises(ProtocolError):
        ex.run(plan, _lengths({"a": [1]}))


@settings(max_examples=60, deadline=None)
@given(
    num_replicas=st.integers(1, 4),
    group_size=st.integers(1, 4),
    num_groups=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    context=st.sampled_from([0.0, 55e-9, 2e-6]),
    with_prompts=st.booleans(),
    spread=st.booleans(),
)
def test_closed_form_equals_event_driven(
    num_replicas: int, group_size: int, num_groups: int, seed: int, context: float,
    with_prompts: bool, spread: bool,
) -> None:
    """Where capacity cannot bind, the closed form (context term and prompt context included)
    equals the event engine, which also runs the (never triggered) capacity checks."""
    rng = np.random.default_rng(seed)
    model = load_profile("illustrative-flat").with_context(context)
    plan = random_plan(rng, num_replicas, group_size, num_groups, step=3, tail_from=2)
    ids = [a.prompt_id for a in plan.assignments]
    if spread:
        plan = _spread_randomly(plan, rng)
    table = {pid: rng.integers(1, 3000, group_size).tolist() for pid in ids}
    prompts = {pid: int(rng.integers(0, 2000)) for pid in ids}
    held = sum(map(sum, table.values())) + group_size * sum(prompts.values())
    cfg = ReplicaConfig(model, kv_capacity_tokens=held, max_num_seqs=num_groups * group_size)
    pools = PoolConfigs.from_specs(cfg, tail_spec=SpecConfig.parse("mtp:3"))
    ptoks = prompts.__getitem__ if with_prompts else None
    fast, slow = (ex.run(plan, _lengths(table), ptoks) for ex in _both(pools))
    assert fast.num_preemptions == slow.num_preemptions == 0
    assert fast.delivered_ids == slow.delivered_ids
    assert [a.prompt_id for a in fast.aborted] == [a.prompt_id for a in slow.aborted]
    assert fast.makespan_s == pytest.approx(slow.makespan_s, rel=1e-9)
    assert fast.tail_time_s == pytest.approx(slow.tail_time_s, rel=1e-9)
    assert fast.bulk_cut_s == pytest.approx(slow.bulk_cut_s, rel=1e-9)
    for a, b in zip(fast.delivered, slow.delivered, strict=True):
        assert a.completion_s == pytest.approx(b.completion_s, rel=1e-9)
    for a, b in zip(fast.aborted, slow.aborted, strict=True):
        assert a.num_finished == b.num_finished
        assert abs(a.tokens_so_far - b.tokens_so_far) <= group_size
    assert abs(fast.wasted_tokens - slow.wasted_tokens) <= group_size * len(fast.aborted)


def _spread_randomly(plan: StepPlan, rng: np.random.Generator) -> StepPlan:
    """The plan with every bulk group's responses on random bulk replicas."""
    out = []
    for a in plan.assignments:
        if a.pool is Pool.BULK and len(plan.bulk_replicas) > 1:
            where = tuple(int(x) for x in rng.choice(plan.bulk_replicas, plan.group_size))
            a = dataclasses.replace(a, replica=where[0], replicas=where)
        out.append(a)
    return dataclasses.replace(plan, assignments=tuple(out))


@pytest.mark.parametrize("ex", _both(PoolConfigs.single(ReplicaConfig(LINEAR))))
def test_spread_group_runs_each_response_on_its_replica(ex: SimExecutor) -> None:
    # two groups of 2 responses spread over 2 replicas: each replica runs one response of each
    plan = build_plan(0, 2, 2, [Placement("a", 0), Placement("b", 1)], num_fresh_to_deliver=1)
    plan = dataclasses.replace(plan, assignments=(
        dataclasses.replace(plan.assignments[0], replicas=(0, 1)),
        dataclasses.replace(plan.assignments[1], replicas=(1, 0)),
    ))
    out = ex.run(plan, _lengths({"a": [2, 3], "b": [1, 5]}))
    # replica 0 runs a0 = 2 and b1 = 5; replica 1 runs a1 = 3 and b0 = 1 (tau(b) = b)
    # a: done at max(2 * 2, 1 * 2 + 2 * 1) = 4 on r0, r1: 1*2 + (3 - 1) * 1 = 4 -> 4
    assert out.delivered_ids == ("a",)
    assert out.delivered[0].completion_s == pytest.approx(4.0)
    assert out.aborted[0].prompt_id == "b" and out.aborted[0].num_finished == 1
