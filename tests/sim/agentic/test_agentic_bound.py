"""The step bound: never above any policy's simulated step, the critical path when one
trajectory runs alone, and close to the best placement found by exhaustive search on tiny
instances."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import replace

import numpy as np
import pytest
from agentic_helpers import simulate_step
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.decision import TurnDecision
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy, decide
from tailsieve.session.routers import make_router
from tailsieve.session.turn import TurnRequest
from tailsieve.sim.agentic.bound import step_lower_bound
from tailsieve.sim.agentic.policies import POLICIES, policy_spec
from tailsieve.sim.agentic.run import simulate_policy
from tailsieve.workload.turns import Trajectory, Turn

CFG = ReplicaConfig.from_profile(builtin_profile("qwen3-4b-h100"), prefill_s_per_token="profile")
TIGHT = replace(CFG, kv_capacity_tokens=24_000, max_num_seqs=6)  # KV-short: preemptions


def _traj(g: int, s: int, prompt: int, turns: list[tuple[int, float, int]]) -> Trajectory:
    ts = [Turn(o, d, t) for o, d, t in turns[:-1]] + [Turn(turns[-1][0])]
    return Trajectory(f"g{g}", s, prompt, tuple(ts))


def _critical_path(tr: Trajectory, cfg: ReplicaConfig) -> float:
    """The trajectory alone: its prefills (the prompt, then each tool's tokens), its decode at
    batch 1 with its own context, its tools."""
    tau1, k = cfg.throughput.tau(1), cfg.throughput.context_s_per_token
    total = 0.0
    for t, u in enumerate(tr.turns):
        c = tr.context_at(t)
        new = c if t == 0 else tr.turns[t - 1].tool_output_tokens
        total += cfg.prefill_cost_s(new, c - new)
        o = u.output_tokens
        total += o * tau1 + k * (o * c + o * o / 2.0)
        total += u.tool_s if t + 1 < tr.num_turns else 0.0
    return total


@pytest.mark.parametrize("replicas", [1, 3])
def test_one_trajectory_alone_is_its_critical_path(replicas: int) -> None:
    tr = _traj(0, 0, 3000, [(400, 2.0, 800), (900, 0.5, 2000), (250, 0, 0)])
    bound = step_lower_bound([tr], [CFG] * replicas)
    crit = _critical_path(tr, CFG)
    assert bound.critical_path_s == pytest.approx(crit, rel=1e-12)
    assert bound.bound_s == pytest.approx(crit, rel=1e-12)
    assert bound.work_s < crit
    step = simulate_step([tr], [CFG] * replicas, make_router("verl-sticky"))
    assert step.step_s == pytest.approx(bound.bound_s, rel=1e-9)


def test_work_sets_the_bound_when_many_share_few_replicas() -> None:
    """64 single-turn trajectories of equal length on one replica: the replica's work, not
    any one path, bounds the step, and the simulated step respects it."""
    trajs = [_traj(g, 0, 500, [(2000, 0, 0)]) for g in range(64)]
    bound = step_lower_bound(trajs, [CFG])
    assert bound.work_s > bound.critical_path_s
    assert bound.bound_s == pytest.approx(max(bound.work_s, bound.tail_s))
    assert simulate_step(trajs, [CFG], make_router("verl-sticky")).step_s >= bound.bound_s


def test_kv_budget_raises_the_bound_of_long_contexts() -> None:
    """With a KV budget few long contexts fit at once, so each of their tokens costs more
    replica time than at peak throughput."""
    trajs = [_traj(g, 0, 12_000, [(1500, 0, 0)]) for g in range(40)]
    free = step_lower_bound(trajs, [replace(CFG, kv_capacity_tokens=None)])
    tight = step_lower_bound(trajs, [replace(CFG, kv_capacity_tokens=30_000)])
    assert tight.work_s > free.work_s
    assert tight.critical_path_s == pytest.approx(free.critical_path_s)


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigError, match="trajectory"):
        step_lower_bound([], [CFG])
    with pytest.raises(ConfigError, match="replica"):
        step_lower_bound([_traj(0, 0, 10, [(5, 0, 0)])], [])
    with pytest.raises(ConfigError, match="share their prompt"):
        step_lower_bound([_traj(0, 0, 10, [(5, 0, 0)]), _traj(0, 1, 11, [(5, 0, 0)])], [CFG])


class _Fixed:
    """Places turn ``(session, turn index)`` where ``table`` says (exhaustive search)."""

    policy = SessionPolicy.VERL

    def __init__(self, table: dict[tuple[Hashable, int], int]) -> None:
        self.table = table

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        return decide(turn, self.table[(turn.session_id, turn.turn_index)], turn.home, True)

    def forget(self, session_id: Hashable) -> None:
        return None


def _tiny(rng: np.random.Generator) -> list[Trajectory]:
    """4-6 trajectories in groups of two, the first three with up to two turns."""
    n = int(rng.integers(4, 7))
    prompts = rng.integers(100, 4000, size=n)
    out = []
    for i in range(n):
        turns = [(int(rng.integers(50, 3000)), float(rng.uniform(0, 3)),
                  int(rng.integers(0, 2000))) for _ in range(int(rng.integers(1, 3)) - 1
                                                              if i < 3 else 0)]
        out.append(_traj(i // 2, i % 2, int(prompts[i // 2]),
                         [*turns, (int(rng.integers(50, 3000)), 0.0, 0)]))
    return out


def test_tight_against_every_placement_of_tiny_instances() -> None:
    """Every placement of every turn on two replicas (up to 2^9 schedules), simulated: the
    best is never below the bound and at most 6% above it (on these 12 instances it is
    exact in 9; the bound ignores how two requests on one replica slow each other below
    peak throughput)."""
    gaps = []
    for seed in range(12):
        trajs = _tiny(np.random.default_rng(seed))
        keys = [(i, t) for i, tr in enumerate(trajs) for t in range(tr.num_turns)]
        best = min(simulate_step(trajs, [CFG, CFG], _Fixed(dict(zip(keys, c, strict=True))))
                   .step_s for c in itertools.product(range(2), repeat=len(keys)))
        bound = step_lower_bound(trajs, [CFG, CFG]).bound_s
        assert bound <= best * (1 + 1e-9)
        gaps.append(best / bound)
    assert max(gaps) <= 1.06
    assert sum(g <= 1 + 1e-9 for g in gaps) >= 6


_turns = st.lists(st.tuples(st.integers(1, 1500), st.floats(0, 3), st.integers(0, 2500)),
                  min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(10, 6000), _turns), min_size=1, max_size=12),
       st.integers(1, 3), st.sampled_from(sorted(POLICIES)), st.booleans())
def test_no_policy_beats_the_bound(raw: list[tuple[int, list[tuple[int, float, int]]]],
                                   replicas: int, policy: str, tight: bool) -> None:
    """Groups of two trajectories sharing their prompt, on roomy or KV-short replicas."""
    trajs = [_traj(i // 2, i % 2, raw[i - i % 2][0], t) for i, (_, t) in enumerate(raw)]
    cfg = TIGHT if tight else CFG
    stats = simulate_policy([trajs], [cfg] * replicas, policy_spec(policy), 0)[0]
    assert stats is not None
    bound = step_lower_bound(trajs, [cfg] * replicas)
    assert bound.bound_s <= stats.step_s * (1 + 1e-9)
    assert bound.bound_s >= max(bound.critical_path_s, bound.work_s)


def test_gap_on_crowded_tiny_instances_is_stated() -> None:
    """Eight one-turn trajectories with long prompts on two replicas, every placement: the
    best is 1.02-1.30x the bound. There the bound is loosest: it charges each request only its
    own context read, while a batch's step reads every running request's context."""
    gaps = []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        prompts = rng.integers(2000, 12000, size=8)
        trajs = [_traj(i // 2, i % 2, int(prompts[i // 2]), [(int(rng.integers(500, 2000)),
                                                               0.0, 0)]) for i in range(8)]
        best = min(simulate_step(trajs, [CFG, CFG], _Fixed({(i, 0): r for i, r in enumerate(c)}))
                   .step_s for c in itertools.product(range(2), repeat=8))
        bound = step_lower_bound(trajs, [CFG, CFG]).bound_s
        assert bound <= best * (1 + 1e-9)
        gaps.append(best / bound)
    assert 1.0 < max(gaps) <= 1.35
