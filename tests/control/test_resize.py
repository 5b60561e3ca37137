"""The replica count changes between steps (a replica failed or came back): the protocol plans
for the new count and the controller re-plans its split."""

from __future__ import annotations

import numpy as np
import pytest
from test_controller import toy_outcome

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ProtocolError
from tailsieve.model.profiles import load_profile


def protocol(policy: str, r: int = 8, m0: int | None = 3) -> RolloutProtocol:
    cfg = ControllerConfig(num_groups=32, num_replicas=r, group_size=2, m0=m0, q0=6)
    return RolloutProtocol(ProtocolConfig(r, 32, 2), make_controller(policy, cfg, load_profile("qwen3-4b-h100")))


def run(proto: RolloutProtocol, stream: PromptStream, steps: int, rng: np.random.Generator) -> None:
    for _ in range(steps):
        plan = proto.plan_step(stream)
        assert plan.num_replicas == proto.config.num_replicas
        assert all(0 <= a.replica < plan.num_replicas for a in plan.assignments)
        assert plan.m <= plan.num_replicas - 1
        proto.update_from_outcome(plan, toy_outcome(plan, rng))


@pytest.mark.parametrize("policy", ["tailsieve", "tailsieve-fixed", "tailsieve-static", "uniform"])
def test_plans_follow_the_replica_count(policy: str) -> None:
    proto = protocol(policy)
    stream = PromptStream(f"p{i}" for i in range(10_000))
    rng = np.random.default_rng(0)
    run(proto, stream, 6, rng)
    for r in (5, 2, 1, 3, 8):
        proto.set_num_replicas(r)
        assert proto.controller.targets().m <= max(r - 1, 0) or policy == "tailsieve-static"
        run(proto, stream, 3, rng)


def test_tailsieve_replans_m_from_its_history() -> None:
    proto = protocol("tailsieve")
    stream = PromptStream(f"p{i}" for i in range(10_000))
    run(proto, stream, 8, rng := np.random.default_rng(1))
    ctl = proto.controller
    proto.set_num_replicas(2)
    assert ctl.targets().m <= 1 and ctl.config.num_replicas == 2  # type: ignore[attr-defined]
    assert "R 8->2" in ctl.state.last_event  # type: ignore[attr-defined]
    proto.set_num_replicas(1)
    assert ctl.targets().m == 0
    run(proto, stream, 2, rng)


def test_fixed_variant_gets_its_split_back() -> None:
    proto = protocol("tailsieve-fixed")
    proto.set_num_replicas(2)
    assert proto.controller.targets().m == 1
    proto.set_num_replicas(8)
    assert proto.controller.targets().m == 3


def test_no_resize_inside_a_step() -> None:
    proto = protocol("tailsieve")
    plan = proto.plan_step(PromptStream(f"p{i}" for i in range(100)))
    with pytest.raises(ProtocolError, match="middle of a step"):
        proto.set_num_replicas(4)
    proto.abandon_step(plan)
    proto.set_num_replicas(4)
