"""The outer loop moves a replica only after ``m_confirmations`` decisions in a row want it, and
the predictor's bulk pool carries the cutoff's still-running groups."""

from __future__ import annotations

import numpy as np
import pytest
from sample_refs import pool_times

from tailsieve.control.config import ControllerConfig
from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.control.outer_loop import OuterDecision
from tailsieve.control.predictor import PoolTimePredictor, StepWork
from tailsieve.core.outcome import GroupResult, StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.model.profiles import load_profile

GPU = load_profile("illustrative-flat")


def uniform_outcome(plan: StepPlan) -> StepOutcome:
    res = tuple(
        GroupResult(a.prompt_id, a.pool, a.replica, 1.0, (100, 200)) for a in plan.assignments
    )
    return StepOutcome(plan.step, res, (), 0.0, 5.0, 5.0, 0, 0)


def moves_after(confirmations: int, wanted: list[int]) -> list[int]:
    """m after each step when the outer loop's decisions are ``wanted`` (a stub)."""
    cfg = ControllerConfig(num_groups=8, num_replicas=4, group_size=2, m0=0,
                           m_confirmations=confirmations, m_hold_steps=0)
    ctl = HierarchicalController(cfg, GPU)
    calls = iter(wanted)

    def decide(*args: object, **kwargs: object) -> OuterDecision:
        new_m = next(calls)
        return OuterDecision(new_m, 2 if new_m else 0, {}, 0.1)

    ctl.outer.decide = decide  # type: ignore[method-assign]
    proto = RolloutProtocol(ProtocolConfig(4, 8, 2), ctl)
    stream = PromptStream(f"p{i}" for i in range(1000))
    out = []
    for _ in wanted:
        if ctl.state.m > 0:
            break
        plan = proto.plan_step(stream)
        proto.update_from_outcome(plan, uniform_outcome(plan))
        out.append(ctl.state.m)
    return out


def test_one_confirmation_moves_at_once() -> None:
    assert moves_after(1, [1]) == [1]


def test_two_confirmations_need_two_decisions_in_a_row() -> None:
    assert moves_after(2, [1, 1]) == [0, 1]
    # a decision to stay in between resets the count
    assert moves_after(2, [1, 0, 1, 1]) == [0, 0, 0, 1]


def test_votes_are_part_of_the_saved_state() -> None:
    cfg = ControllerConfig(num_groups=8, num_replicas=4, m_confirmations=3)
    ctl = HierarchicalController(cfg, GPU)
    ctl.state.m_votes = -2
    other = HierarchicalController(cfg, GPU)
    other.load_state_dict(ctl.state_dict())
    assert other.state.m_votes == -2


@pytest.mark.parametrize(("replicas", "batch"), [(3, 1), (2, 2)])
def test_bulk_prediction_keeps_the_cut_groups_running(replicas: int, batch: int) -> None:
    """q = 1 of two one-response groups: the tail gets the first; the bulk gets the other plus
    one group that is still running when the cutoff comes (it shares a replica when R - m = 1)."""
    pred = PoolTimePredictor(2, replicas, GPU, GPU)
    p = pred.predict([StepWork([[100], [200]], num_tail=1)], q=1, m=1)
    assert p.tail_s == pytest.approx(100 * GPU.tau(1))
    assert p.bulk_s == pytest.approx(200 * GPU.tau(batch))


def test_more_cut_groups_never_speed_the_bulk_up() -> None:
    rng = np.random.default_rng(1)
    groups = [[int(x) for x in rng.integers(50, 4000, 4)] for _ in range(32)]
    pred = PoolTimePredictor(32, 8, GPU, GPU)
    smp = pred.samples([StepWork(groups, num_tail=4)])
    bulk = [pred.predict_samples(smp, q, 2).bulk_s for q in (2, 4, 6, 8)]
    no_cut = pool_times(smp[0], np.where(np.arange(32) >= 2, np.arange(32) - 2, -1), 6, GPU)
    assert bulk[0] >= float(no_cut[0].max()) - 1e-9
    assert all(b > 0 for b in bulk)
