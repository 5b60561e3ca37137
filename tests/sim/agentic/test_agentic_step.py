"""The agentic simulator: every turn runs once, caches and tool waits behave, moves keep
token counts exact."""

from __future__ import annotations

import numpy as np
import pytest
from agentic_helpers import simulate_step
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.routers import make_router
from tailsieve.sim.agentic.policies import POLICIES, policy_spec
from tailsieve.sim.agentic.run import simulate_policy, yardstick_s
from tailsieve.sim.agentic.step import StepOptions, TurnStepSim
from tailsieve.workload.turns import Trajectory, Turn

CFG = ReplicaConfig.from_profile(builtin_profile("qwen3-4b-h100"), prefill_s_per_token="profile")


def _traj(g: int, s: int, prompt: int, turns: list[tuple[int, float, int]]) -> Trajectory:
    ts = [Turn(o, d, t) for o, d, t in turns[:-1]] + [Turn(turns[-1][0])]
    return Trajectory(f"g{g}", s, prompt, tuple(ts))


def test_one_session_on_one_replica_hits_its_prefix() -> None:
    tr = _traj(0, 0, 1000, [(100, 2.0, 50), (200, 1.0, 30), (10, 0, 0)])
    stats = simulate_step([tr], [CFG], make_router("verl-sticky"))
    assert stats.num_turns == 3
    assert stats.prompt_tokens == 1000 + 1150 + 1380
    assert stats.cached_tokens == 1100 + 1350  # each turn finds the previous context
    assert stats.reprefilled_tokens == 0
    solo = sum(u.output_tokens for u in tr.turns) * CFG.throughput.tau(1)
    assert stats.step_s >= 3.0 + solo * 0.999


def test_siblings_on_one_replica_prefill_their_prompt_once() -> None:
    """A group's prompt is cached once its first trajectory's prefill ran (vLLM's prefix
    caching): a sibling sent to the same replica after it finds the whole prompt there."""
    trajs = [_traj(0, s, 3000, [(50, 0, 0)]) for s in range(3)]
    stats = simulate_step(trajs, [CFG], make_router("verl-sticky"))
    assert stats.cached_tokens == 2 * 3000 and stats.prefilled_tokens == 3000
    spread = simulate_step(trajs, [CFG] * 3, make_router("sticky-least-loaded"))
    assert spread.cached_tokens == 0 and spread.prefilled_tokens == 3 * 3000


def test_tool_waits_hold_no_decode_slot() -> None:
    """While one session waits on a long tool, another decodes alone (tau(1))."""
    a = _traj(0, 0, 100, [(10, 100.0, 10), (10, 0, 0)])
    b = _traj(1, 0, 100, [(4000, 0, 0)])
    sim = TurnStepSim([a, b], [CFG], make_router("verl-sticky"), StepOptions())
    stats = sim.run()
    tau1 = CFG.throughput.tau(1)
    k = CFG.throughput.context_s_per_token
    alone = 4000 * (tau1 + k * (100 + 2000))
    assert stats.step_s >= 100.0
    assert sim.reps.engines[0].busy_s < 100.0 + 2 * alone


def test_round_robin_reprefills_and_sticky_does_not() -> None:
    trajs = [_traj(g, s, 2000, [(50, 0.5, 500)] * 4 + [(50, 0, 0)])
             for g in range(4) for s in range(2)]
    sticky = simulate_step(trajs, [CFG] * 3, make_router("verl-sticky"))
    rr = simulate_step(trajs, [CFG] * 3, make_router("turn-round-robin"))
    assert sticky.reprefilled_tokens == 0 and sticky.boundary_moves == 0
    assert rr.reprefilled_tokens > 0 and rr.boundary_moves > 0
    assert rr.hit_rate < sticky.hit_rate


def test_midturn_moves_keep_every_token() -> None:
    """A crowded replica and an idle one: mid-turn moves happen and every trajectory still
    ends with exactly its turns (the step ends only when all are done)."""
    rng = np.random.default_rng(3)
    trajs = [_traj(g, 0, 3000, [(int(rng.integers(200, 3000)), 0.2, 100),
                                (int(rng.integers(200, 3000)), 0, 0)]) for g in range(24)]
    opts = StepOptions(True, BalanceSettings(interval_s=1.0, horizon_s=30.0,
                                             expected_step_s=60.0))
    sim = TurnStepSim(trajs, [CFG] * 3, make_router("tailsieve"), opts)
    stats = sim.run()
    assert stats.midturn_moves > 0
    assert stats.num_turns == 48 and sim.left == 0
    assert all(sim.turn[i] == 1 and sim.where[i] == -1 for i in range(24))


_turns = st.lists(st.tuples(st.integers(1, 400), st.floats(0, 3), st.integers(0, 300)),
                  min_size=1, max_size=4)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(10, 3000), _turns), min_size=1, max_size=10),
       st.integers(1, 3), st.sampled_from(sorted(POLICIES)))
def test_every_turn_runs_once_under_every_policy(
        raw: list[tuple[int, list[tuple[int, float, int]]]], replicas: int, policy: str) -> None:
    trajs = [_traj(i // 2, i % 2, p, t) for i, (p, t) in enumerate(raw)]
    stats = simulate_policy([trajs], [CFG] * replicas, policy_spec(policy), 0)[0]
    assert stats is not None
    assert stats.num_turns == sum(t.num_turns for t in trajs)
    assert stats.prompt_tokens == sum(t.context_at(k) for t in trajs for k in range(t.num_turns))
    assert 0 <= stats.cached_tokens <= stats.prompt_tokens
    assert stats.prefilled_tokens == stats.prompt_tokens - stats.cached_tokens
    assert stats.step_s >= max(t.tool_s for t in trajs)
    assert stats.step_s > 0 and yardstick_s(trajs, [CFG] * replicas) > 0


def test_checks_follow_the_balance_settings() -> None:
    trajs = [_traj(0, 0, 100, [(2000, 0, 0)])]
    few = TurnStepSim(trajs, [CFG], make_router("tailsieve"), StepOptions(True)).run()
    many = TurnStepSim(trajs, [CFG], make_router("tailsieve"), StepOptions(
        True, BalanceSettings(interval_s=0.5, horizon_s=30.0))).run()
    assert many.checks > few.checks > 0
    with pytest.raises(ConfigError, match="interval_s"):
        BalanceSettings(interval_s=0, horizon_s=1.0)


def test_verl_rebalance_aborts_and_resumes_when_a_replica_runs_dry() -> None:
    """verl's default packs both long turns on one replica (seed 0's ties); once the other
    replica runs dry, rebalance_requests aborts both and resumes one on each replica: the step
    nearly matches the balanced placement's, after re-prefilling the moved turn's context."""
    trajs = [_traj(i, 0, 500, [(n, 0, 0)]) for i, n in enumerate([8000, 1000, 8000, 50, 50, 50])]
    packed = simulate_step(trajs, [CFG] * 2, make_router("verl-sticky",
                                                         rng=np.random.default_rng(0)))
    balanced = simulate_step(trajs, [CFG] * 2, make_router("verl-sticky",
                                                           rng=np.random.default_rng(1)))
    rebalanced = simulate_step(trajs, [CFG] * 2, make_router("verl-rebalance",
                                                             rng=np.random.default_rng(0)))
    assert packed.step_s > 1.05 * balanced.step_s
    assert rebalanced.midturn_moves == 1 and rebalanced.midturn_prefill_tokens > 500
    assert rebalanced.num_turns == 6
    assert balanced.step_s <= rebalanced.step_s <= 1.01 * balanced.step_s
