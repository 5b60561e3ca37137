"""Several steps of one policy: fresh routers and caches per step (new weights invalidate
prefix caches), the balance gate and the step-time estimate carried across steps.

The balance gate (``control.balance_gate``, its default ``GateConfig``) keeps TailSieve's
moves off where they do not pay: each step's observed time is divided by a yardstick of the
step's own work (``yardstick_s``: the same for both modes, so its error cancels), and moves
stay on while the recent steps with moves ran faster on that measure than those without.
Step 1 runs without moves (the gate's calibration); it needs ``min_balanced`` steps with
moves before it may switch them off.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tailsieve.control.balance_gate import BalanceGate, GateConfig
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.admission import AdmissionSettings, StepShape, kv_bound
from tailsieve.session.remaining import RemainingWork
from tailsieve.session.routers import make_router
from tailsieve.session.settings import SessionSettings
from tailsieve.session.yardstick import yardstick_s
from tailsieve.sim.agentic.policies import PolicySpec
from tailsieve.sim.agentic.stats import StepStats
from tailsieve.sim.agentic.step import StepOptions, TurnStepSim
from tailsieve.workload.turns import Trajectory

__all__ = ["RunOptions", "simulate_policy", "yardstick_s"]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What every step of a run shares."""

    step: StepOptions = field(default_factory=StepOptions)
    settings: SessionSettings = field(default_factory=SessionSettings)
    gate: GateConfig = field(default_factory=GateConfig)


def simulate_policy(steps: Sequence[Sequence[Trajectory]], configs: Sequence[ReplicaConfig],
                    spec: PolicySpec, seed: int, options: RunOptions | None = None,
                    measure_from: int = 0) -> list[StepStats | None]:
    """Run ``steps`` in order under ``spec``; entry ``s`` of the result is step ``s``'s
    stats (None for a step before ``measure_from`` that a policy without cross-step state
    skips: its steps do not depend on earlier ones; admission by KV room carries the
    previous step's final contexts)."""
    opts = options or RunOptions()
    gate = BalanceGate(opts.gate) if spec.gate else None
    out: list[StepStats | None] = []
    expected = 0.0
    shape: StepShape | None = None  # the previous step's (whether admission pays)
    for s, trajs in enumerate(steps):
        if gate is None and spec.kv_share is None and s < measure_from:
            out.append(None)
            continue
        moves = gate.balances_next() if gate is not None else True
        kv = (shape.final_context_tokens if shape is not None and spec.kv_share is not None
              and kv_bound(shape, configs) else None)
        stats = _one_step(trajs, configs, spec, seed, s, opts, moves, expected, kv)
        stats.moves_on = moves
        if gate is not None:
            gate.observe(moves, stats.step_s / yardstick_s(trajs, configs))
        expected = stats.step_s
        shape = step_shape(trajs)
        out.append(stats)
    return out


def _one_step(trajs: Sequence[Trajectory], configs: Sequence[ReplicaConfig], spec: PolicySpec,
              seed: int, step: int, opts: RunOptions, moves: bool,
              expected_step_s: float, final_context: float | None) -> StepStats:
    """One step; ``final_context``: admit sessions by KV room, each reserving at least that
    many tokens (None: no admission)."""
    rng = np.random.default_rng([seed, step, 7])
    settings = replace(opts.settings, moves=moves and spec.boundary_moves,
                       expected_step_s=expected_step_s,
                       group_price=opts.settings.group_price and spec.group_price)
    step_opts = replace(opts.step, midturn=spec.midturn and moves,
                        balance=replace(opts.step.balance, expected_step_s=expected_step_s),
                        priority=spec.priority if spec.priority != "off" else opts.step.priority,
                        admission=(AdmissionSettings(spec.kv_share or 1.0, final_context)
                                   if final_context is not None else opts.step.admission))
    remaining = RemainingWork() if spec.remaining or step_opts.priority == "remaining" else None
    holder: list[TurnStepSim] = []
    kw = dict(spec.kw)
    if spec.router.value == "tailsieve":
        kw["expected_turn_tokens"] = lambda: holder[0].expected_turn_tokens
        if spec.remaining:
            kw["remaining_work"] = remaining
    if spec.router.value == "length-informed":
        kw["remaining"] = _remaining(trajs)
    if spec.router.value == "group-colocate":  # the burst: every first turn, at time 0
        kw["window"] = [(i, t.prompt_id, t.prompt_tokens) for i, t in enumerate(trajs)]
    router = make_router(spec.router, settings, rng, **kw)
    sim = TurnStepSim(trajs, configs, router, step_opts, remaining)
    holder.append(sim)
    return sim.run()


def step_shape(trajs: Sequence[Trajectory]) -> StepShape:
    """What a step that has ended showed of its sessions (``session.admission.StepShape``)."""
    turns = contexts = outputs = finals = 0
    for t in trajs:
        ctx = t.prompt_tokens
        for u in t.turns:
            turns += 1
            contexts += ctx
            outputs += u.output_tokens
            ctx += u.output_tokens + u.tool_output_tokens
        finals += ctx - t.turns[-1].tool_output_tokens
    n = max(turns, 1)
    return StepShape(len(trajs), contexts / n, finals / max(len(trajs), 1), outputs / n)


def _remaining(trajs: Sequence[Trajectory]) -> Callable[[Hashable, int], float]:
    """The length-informed router's lengths: tokens trajectory ``session`` generates from
    turn ``t`` on."""
    left = [np.cumsum([u.output_tokens for u in t.turns][::-1])[::-1].tolist() for t in trajs]

    def remaining(session: Hashable, turn_index: int) -> float:
        assert isinstance(session, int)
        got = left[session]
        return float(got[turn_index]) if turn_index < len(got) else 0.0
    return remaining
