"""A run resumed from a JSON checkpoint of the protocol continues exactly as the unbroken run."""

from __future__ import annotations

import json

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.speculative import SpecConfig
from tailsieve.sim.driver import PairedLengths
from tailsieve.sim.executor import SimExecutor
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.workload import load_workload

R, N, n = 4, 16, 4


def fresh_protocol() -> RolloutProtocol:
    # m0 = 1: isolate from the first step, so the resumed state holds carried groups and a
    # tail pool (the spread default starts in balance mode)
    cfg = ControllerConfig(num_groups=N, num_replicas=R, group_size=n, m0=1)
    return RolloutProtocol(ProtocolConfig(R, N, n), make_controller("tailsieve", cfg, load_profile("cpu")))


def run(steps: int, resume_at: int | None) -> list[tuple[object, ...]]:
    wl = load_workload("paper-math", num_prompts=400, seed=3)
    lengths = PairedLengths(wl, n, 3)
    pools = PoolConfigs.from_specs(ReplicaConfig(load_profile("cpu")), SpecConfig(), SpecConfig())
    executor = SimExecutor(pools)
    ids = list(wl.prompt_ids())
    proto, stream = fresh_protocol(), PromptStream(ids)
    trace = []
    for t in range(steps):
        if t == resume_at:
            blob = json.dumps(proto.state_dict())
            drawn = stream.num_drawn
            proto, stream = fresh_protocol(), PromptStream(ids)
            proto.load_state_dict(json.loads(blob))
            stream.skip(drawn)
        plan = proto.plan_step(stream)
        outcome = executor.run(plan, lengths)
        proto.update_from_outcome(plan, outcome)
        trace.append((plan.q, plan.m, plan.num_extra, plan.assignments, round(outcome.makespan_s, 9)))
    return trace


def test_resumed_run_continues_identically() -> None:
    full = run(14, None)
    assert any(q > 0 for q, *_ in full)  # the controller did act
    for k in (3, 7, 11):
        assert run(14, k) == full
