"""The levers in the agentic simulator: admission by KV room keeps a KV-bound replica out of
recompute and loses no turn; engine priority runs every turn; bad options are refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.admission import AdmissionSettings
from tailsieve.session.routers import make_router
from tailsieve.sim.agentic.step import StepOptions, TurnStepSim
from tailsieve.workload.turns import Trajectory, Turn

CFG = replace(ReplicaConfig.from_profile(builtin_profile("qwen3-4b-h100"),
                                         prefill_s_per_token="profile"),
              kv_capacity_tokens=60_000)


def _trajs() -> list[Trajectory]:
    """16 sessions of 6 turns growing to ~16K tokens each on replicas of 60K KV: KV-bound."""
    out = []
    for g in range(8):
        for s in range(2):
            turns = (*(Turn(300 + 40 * g, 0.5, 2000) for _ in range(5)), Turn(200))
            out.append(Trajectory(f"g{g}", s, 3000, turns))
    return out


def _run(options: StepOptions) -> tuple[TurnStepSim, int]:
    trajs = _trajs()
    sim = TurnStepSim(trajs, [CFG, CFG], make_router("tailsieve"), options)
    stats = sim.run()
    assert stats.num_turns == sum(t.num_turns for t in trajs)  # no turn lost or repeated
    assert sim.left == 0 and not sim.queue
    return sim, stats.preemptions


def test_admission_by_kv_room_keeps_contexts_cached_between_turns() -> None:
    free, pre_free = _run(StepOptions())
    held, pre_held = _run(StepOptions(admission=AdmissionSettings(1.0, 16_000)))
    assert free.stats.reprefilled_tokens > 0  # the contexts were evicted between turns
    assert pre_held <= pre_free
    assert held.stats.hit_rate > free.stats.hit_rate
    assert held.stats.reprefilled_tokens < free.stats.reprefilled_tokens


@pytest.mark.parametrize("source", ["remaining", "oracle"])
def test_engine_priority_runs_every_turn(source: str) -> None:
    sim, _ = _run(StepOptions(priority=source))
    assert all(e.priority for e in sim.reps.engines)
    assert sim.remaining is not None or source == "oracle"


def test_a_bad_priority_source_is_refused() -> None:
    with pytest.raises(ConfigError, match="priority"):
        StepOptions(priority="fastest")
