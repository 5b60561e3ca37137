"""Hierarchical controller: validation, convergence on a toy two-pool model, exact resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.control.inner_loop import InnerLoop
from tailsieve.core.outcome import AbortedGroup, GroupResult, StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_groups": 0, "num_replicas": 4},
        {"num_groups": 8, "num_replicas": 4, "q0": 8},
        {"num_groups": 8, "num_replicas": 4, "m0": 4},
        {"num_groups": 8, "num_replicas": 4, "momentum": 1.0},
        {"num_groups": 8, "num_replicas": 4, "m_radius": 0},
        {"num_groups": 8, "num_replicas": 4, "m_confirmations": 0},
    ],
)
def test_config_out_of_range_is_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ControllerConfig(**kwargs)  # type: ignore[arg-type]


def toy_outcome(plan: StepPlan, rng: np.random.Generator) -> StepOutcome:
    """Tail time grows with groups per tail replica, bulk time with groups per bulk replica."""
    n = plan.group_size
    per_tail = plan.q / max(plan.m, 1)
    per_bulk = (plan.num_required - plan.q) / (plan.num_replicas - plan.m)
    tail = 10.0 * (1 + 0.5 * per_tail) if plan.q else 0.0
    bulk = 2.0 * per_bulk + 20.0 * (plan.q == 0)
    noise = float(rng.normal(1.0, 0.01))
    delivered = [a for a in plan.assignments if not plan.is_abortable(a)]
    delivered += [a for a in plan.assignments if plan.is_abortable(a)][: plan.num_fresh_to_deliver]
    res = tuple(GroupResult(a.prompt_id, a.pool, a.replica, 1.0, tuple([100] * n)) for a in delivered)
    extra = [a for a in plan.assignments if plan.is_abortable(a)][plan.num_fresh_to_deliver :]
    aborted = tuple(AbortedGroup(a.prompt_id, a.replica, 0, 0, -1, 0) for a in extra)
    return StepOutcome(plan.step, res, aborted, tail * noise, bulk * noise, max(tail, bulk), 0, 0)


def q_trajectory(q0: int) -> list[int]:
    cfg = ControllerConfig(
        num_groups=32, num_replicas=4, group_size=2, q0=q0, m0=2, outer_enabled=False, inner_target="rates"
    )
    proto = RolloutProtocol(ProtocolConfig(4, 32, 2), HierarchicalController(cfg, load_profile("illustrative-flat")))
    stream = PromptStream(f"p{i}" for i in range(10_000))
    rng = np.random.default_rng(0)
    qs = []
    for _ in range(40):
        plan = proto.plan_step(stream)
        proto.update_from_outcome(plan, toy_outcome(plan, rng))
        qs.append(plan.q)
    return qs


def test_inner_loop_converges_to_the_same_q_from_both_ends() -> None:
    # exact balance 10 + 2.5 q = 32 - q at q = 6.3; the rate model's fixed point is q* ~ 5.8
    low, high = q_trajectory(1), q_trajectory(16)
    assert abs(low[-1] - high[-1]) <= 1
    assert 5 <= low[-1] <= 7 and 5 <= high[-1] <= 7
    assert low[-5:] == [low[-1]] * 5  # settled, no oscillation


def test_inner_loop_holds_after_changes() -> None:
    loop = InnerLoop(ControllerConfig(num_groups=64, num_replicas=8))
    d = loop.decide(q=4, tail_s=10.0, bulk_s=40.0)
    assert d.q_star > 4 and d.new_q > 4 and d.predicted_gain > 0
    d = loop.decide(q=4, tail_s=40.0, bulk_s=40.0)  # balanced: momentum still pushes up, gain is nil
    assert d.new_q == 4


def test_state_roundtrips_through_json_exactly() -> None:
    cfg = ControllerConfig(num_groups=16, num_replicas=4, group_size=2)
    ctl = make_controller("tailsieve", cfg, load_profile("cpu"))
    proto = RolloutProtocol(ProtocolConfig(4, 16, 2), ctl)
    stream = PromptStream(f"p{i}" for i in range(1000))
    rng = np.random.default_rng(1)
    for _ in range(5):
        plan = proto.plan_step(stream)
        proto.update_from_outcome(plan, toy_outcome(plan, rng))
    blob = json.dumps(proto.state_dict())
    other = RolloutProtocol(ProtocolConfig(4, 16, 2), make_controller("tailsieve", cfg, load_profile("cpu")))
    other.load_state_dict(json.loads(blob))
    assert json.dumps(other.state_dict()) == blob
    assert other.controller.targets() == proto.controller.targets()


def test_fixed_variant_holds_the_split_at_half() -> None:
    ctl = make_controller("tailsieve-fixed", ControllerConfig(num_groups=64, num_replicas=8), load_profile("illustrative-flat"))
    assert ctl.targets().m == 4
    with pytest.raises(ConfigError, match="unknown step policy"):
        make_controller("bogus", ControllerConfig(num_groups=64, num_replicas=8), load_profile("illustrative-flat"))
    assert Pool.TAIL.value == "tail"
