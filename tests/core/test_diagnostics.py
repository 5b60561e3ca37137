"""Step diagnostics against hand-computed small steps (tau(b) = 1 s: a request of L tokens
finishes at L seconds, so every number below can be checked on paper)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plan_helpers import Placement, build_plan
from tailsieve.core.diagnostics import PredictedPoolTimes, diagnose_step
from tailsieve.core.outcome import GroupResult, StepOutcome
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.errors import ConfigError
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.replicas import PoolConfigs

FLAT = ThroughputModel.from_pairs([(1, 1.0), (8, 1.0)], name="flat")


def _plan() -> StepPlan:
    """R = 2: candidate T pinned on tail replica 1; fresh A, B, C on bulk replica 0, two of
    them needed (c = 1 extra)."""
    placements = [
        Placement("T", 1, Pool.TAIL, pinned=True),
        Placement("A", 0), Placement("B", 0), Placement("C", 0),
    ]
    plan = build_plan(3, 2, 2, placements, num_fresh_to_deliver=2, num_extra=1)
    return replace(plan, num_required=3)  # the tail group is pinned and counted once


def _run(lengths: dict[str, list[int]], executor: SimExecutor) -> tuple[StepPlan, StepOutcome]:
    plan = _plan()
    return plan, executor.run(plan, lambda pid, step: lengths[pid])


EXECUTORS = [
    SimExecutor(PoolConfigs.single(ReplicaConfig(FLAT))),
    SimExecutor(PoolConfigs.single(ReplicaConfig(FLAT)), force_event_driven=True),
]


@pytest.mark.parametrize("ex", EXECUTORS)
def test_tail_caught_the_longest_group(ex: SimExecutor) -> None:
    # T: 10, 4 -> tail ends at 10. A ends at 5, B at 6 -> cutoff 6. C (9, 1): its 1-token
    # response finished, the other had 6 tokens at the cutoff: 7 tokens wasted.
    plan, out = _run({"T": [10, 4], "A": [3, 5], "B": [2, 6], "C": [9, 1]}, ex)
    pred = PredictedPoolTimes(tail_s=8.0, bulk_s=5.0, raw_tail_s=9.0, raw_bulk_s=4.0)
    d = diagnose_step(out, plan, pred)
    assert d.cutoff_s == pytest.approx(6.0)
    assert d.tail_time_s == pytest.approx(10.0)
    assert d.bulk_cut_s == pytest.approx(6.0)
    assert d.tail_idle_replica_s == pytest.approx(0.0)
    assert d.idle_replica_s == pytest.approx(4.0)  # bulk replica idle from 6 to 10
    assert d.aborted_tokens == 7
    # replica 0 up to the cutoff: 7 aborted tokens against A (3 + 5) and B (2 + 6)
    assert d.aborted_replica_s == pytest.approx(6.0 * 7 / (7 + 16))
    assert d.wasted_fraction == pytest.approx(7 / (14 + 8 + 8 + 7))
    assert (d.capture_k, d.capture_candidates, d.capture_tail) == (1, 1, 1)
    assert d.capture_rate == 1.0
    assert d.tail_ratio == pytest.approx(10.0 / 8.0)
    assert d.bulk_ratio == pytest.approx(6.0 / 5.0)
    assert d.predicted_makespan_s == 8.0
    assert (d.raw_predicted_tail_s, d.raw_predicted_bulk_s) == (9.0, 4.0)
    assert d.num_replicas == 2


@pytest.mark.parametrize("ex", EXECUTORS)
def test_longest_group_missed_by_the_cutoff(ex: SimExecutor) -> None:
    # T: 4, 4 ends at 4. A at 5, C (9, 1) at 9 -> cutoff 9. B (2, 12): 2 + 9 tokens wasted.
    # The longest delivered group is C (9), a fresh group: capture 0 of 1.
    plan, out = _run({"T": [4, 4], "A": [3, 5], "B": [2, 12], "C": [9, 1]}, ex)
    d = diagnose_step(out, plan)
    assert d.cutoff_s == pytest.approx(9.0)
    assert d.tail_time_s == pytest.approx(4.0)
    assert out.makespan_s == pytest.approx(9.0)
    assert d.tail_idle_replica_s == pytest.approx(5.0)
    assert d.idle_replica_s == pytest.approx(5.0)
    assert d.aborted_tokens == 11
    assert d.aborted_replica_s == pytest.approx(9.0 * 11 / (11 + 8 + 10))
    assert (d.capture_k, d.capture_candidates, d.capture_tail) == (1, 0, 0)
    assert d.capture_rate == 0.0
    assert d.predicted_tail_s is None and d.tail_ratio is None and d.bulk_ratio is None


def test_baseline_without_plan() -> None:
    groups = (
        GroupResult("a", Pool.BULK, 0, 3.0, (3, 1)),
        GroupResult("b", Pool.TAIL, 1, 7.0, (7, 7)),
    )
    out = StepOutcome(step=0, delivered=groups, aborted=(), tail_time_s=7.0, bulk_cut_s=3.0,
                      makespan_s=7.0, wasted_tokens=0, generated_tokens=18,
                      replica_busy_s=(3.0, 7.0, 0.0))
    d = diagnose_step(out, tail_replicas=(1,), num_replicas=3)
    assert d.cutoff_s == 3.0
    assert d.tail_idle_replica_s == 0.0
    assert d.idle_replica_s == pytest.approx(4.0 + 0.0 + 7.0)
    assert d.aborted_replica_s == 0.0 and d.aborted_tokens == 0 and d.wasted_fraction == 0.0
    assert d.capture_k == 0 and d.capture_rate is None


def test_busy_times_derived_when_the_outcome_has_none() -> None:
    groups = (GroupResult("a", Pool.BULK, 0, 3.0, (3,)), GroupResult("b", Pool.BULK, 1, 5.0, (5,)))
    out = StepOutcome(step=0, delivered=groups, aborted=(), tail_time_s=0.0, bulk_cut_s=5.0,
                      makespan_s=5.0, wasted_tokens=0, generated_tokens=8)
    assert diagnose_step(out, num_replicas=2).idle_replica_s == pytest.approx(2.0)
    with pytest.raises(ConfigError):
        diagnose_step(out)


def test_prediction_rejects_negative_times() -> None:
    with pytest.raises(ConfigError, match="bulk_s"):
        PredictedPoolTimes(1.0, -1.0, 1.0, 1.0)


@pytest.mark.parametrize("ex", EXECUTORS)
def test_simulator_work_at_cutoff_matches_the_group_estimate(ex: SimExecutor) -> None:
    plan = _plan()
    res = ex.run_detailed(plan, lambda pid, step: {"T": [10, 4], "A": [3, 5], "B": [2, 6],
                                                  "C": [9, 1]}[pid])
    assert res.work_at_cutoff == ((7.0, 16.0), (0.0, 14.0))
    d = diagnose_step(res.outcome, plan, work_at_cutoff=res.work_at_cutoff)
    assert d.aborted_replica_s == pytest.approx(6.0 * 7 / 23)


@pytest.mark.parametrize("ex", EXECUTORS)
def test_spread_groups_count_aborted_work_on_each_replica(ex: SimExecutor) -> None:
    # R = 2, every group spread: response 0 on replica 0, response 1 on replica 1. A ends at 5,
    # B at 6 = cutoff. C (9, 1): its replica-1 response finished (1 token), its replica-0
    # response had 6 tokens at the cutoff.
    assigns = tuple(GroupAssignment(p, Pool.BULK, 0, False, i, replicas=(0, 1))
                    for i, p in enumerate(("A", "B", "C")))
    plan = StepPlan(step=1, num_replicas=2, group_size=2, num_required=2, q=0, m=0,
                    num_extra=1, tail_replicas=(), bulk_replicas=(0, 1), assignments=assigns,
                    num_fresh_to_deliver=2, fresh_prompt_ids=("A", "B", "C"),
                    is_warmup=False, is_flush=False)
    table = {"A": [3, 5], "B": [2, 6], "C": [9, 1]}
    res = ex.run_detailed(plan, lambda pid, step: table[pid])
    assert res.outcome.delivered_ids == ("A", "B")
    # replica 0: A_0 = 6 against 3 + 2; replica 1: A_1 = 1 against 5 + 6 (no aborted request
    # still running there, so delivered requests count in full)
    assert res.work_at_cutoff == ((6.0, 5.0), (1.0, 11.0))
    d = diagnose_step(res.outcome, plan, work_at_cutoff=res.work_at_cutoff)
    assert d.cutoff_s == pytest.approx(6.0)
    assert d.aborted_tokens == 7
    assert d.aborted_replica_s == pytest.approx(6.0 * 6 / 11 + 6.0 * 1 / 12)
