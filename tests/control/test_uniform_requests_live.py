"""``uniform-requests`` in the live runtime: the protocol places every response exactly where the
simulator's ``uniform-requests`` policy does, and a live rollout sends them there."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.policy.registry import get_policy
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.stub import StubTransport
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.replicas import PoolConfigs

CPU = load_profile("cpu")


@given(groups=st.integers(1, 9), n=st.integers(1, 6), replicas=st.integers(1, 5))
def test_plan_matches_the_simulators_policy(groups: int, n: int, replicas: int) -> None:
    ccfg = ControllerConfig(num_groups=groups, num_replicas=replicas, group_size=n)
    ctl = make_controller("uniform-requests", ccfg, CPU)
    assert ctl.name == "uniform-requests"
    proto = RolloutProtocol(ProtocolConfig(num_replicas=replicas, num_groups=groups,
                                           group_size=n), ctl)
    stream = PromptStream(iter(f"p{i}" for i in range(10 * groups)))
    ex = SimExecutor(PoolConfigs.single(ReplicaConfig(throughput=CPU)))
    want = get_policy("uniform-requests").route([np.ones(n)] * groups, replicas, CPU)
    for _ in range(3):
        plan = proto.plan_step(stream)
        assert (plan.q, plan.m, plan.num_extra) == (0, 0, 0)
        assert len(plan.assignments) == groups
        got = [a.response_replicas(n) for a in plan.assignments]
        assert got == [tuple(int(r) for r in part) for part in want.replicas]
        out: StepOutcome = ex.run(plan, lambda pid, _s: [10] * n)
        proto.update_from_outcome(plan, out)
        assert not proto.candidates


async def test_live_rollout_sends_each_response_round_robin() -> None:
    urls = [f"http://r{i}" for i in range(2)]
    stub = StubTransport(lambda p, s: 5, seconds_per_token=0.0001)
    cfg = RolloutConfig(num_groups=3, group_size=3, policy="uniform-requests", model="m",
                        sampling=SamplingParams(max_tokens=50, seed=0))
    async with TailSieveRollout(urls, cfg, transport=stub) as ro:
        assert ro.num_fresh_needed() == 3
        batch = await ro.step([PromptInput(f"p{i}", text=f"p{i}") for i in range(3)])
        assert [g.prompt_id for g in batch.groups] == ["p0", "p1", "p2"]
        assert ro.num_carried == 0 and batch.metrics.num_aborted == 0
    # 9 responses dealt one by one over 2 replicas: 5 on the first, 4 on the second, and
    # every group on both
    per_url = Counter(u.split("/v1/")[0] for u, _p, _s in stub.log.started)
    assert per_url == {urls[0]: 5, urls[1]: 4}
    for pid in ("p0", "p1", "p2"):
        assert {u.split("/v1/")[0] for u, p, _s in stub.log.started if p == pid} == set(urls)
