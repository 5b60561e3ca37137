"""Live steps of several policies through ``TailSieveRollout``, interleaved step by step."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from real_engine.servers import loadavg, log
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.runtime.backends import PromptInput, SamplingParams
from tailsieve.runtime.executor import LiveExecutor
from tailsieve.runtime.replay import ReplayLengths
from tailsieve.runtime.rollout import RolloutBatch, RolloutConfig, TailSieveRollout
from tailsieve.runtime.step_state import StepResult


@dataclass(slots=True)
class LiveStep:
    """One live step: its plan, outcome, wall time and the machine's load then."""

    plan: StepPlan
    outcome: StepOutcome
    wall_s: float
    loadavg: str
    seq: int  # position of this step among all policies' steps, in the order they ran


class Recorder:
    """Wraps ``executor.run`` to keep every step's plan and result. Passes every argument
    through (the rollout calls ``run(plan, prompts, active)``)."""

    def __init__(self, executor: LiveExecutor) -> None:
        self.captured: list[tuple[StepPlan, StepResult]] = []
        self._inner = executor.run
        executor.run = self.run  # type: ignore[method-assign]

    async def run(self, plan: StepPlan, *args: Any, **kwargs: Any) -> StepResult:
        res = await self._inner(plan, *args, **kwargs)
        self.captured.append((plan, res))
        return res


@dataclass(slots=True)
class Lane:
    """One policy's rollout and what it delivered."""

    policy: str
    ro: TailSieveRollout
    recorder: Recorder
    prompts: Iterator[PromptInput]
    steps: list[LiveStep] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)


def check_batch(lane: Lane, batch: RolloutBatch, lengths: ReplayLengths, groups: int | None,
                group_size: int) -> None:
    """N groups (``groups``; None in a flush) of n responses, each exactly its forced length
    (``finish_reason == "length"``), no prompt delivered twice."""
    if groups is not None:
        assert len(batch.groups) == groups, (lane.policy, batch.step, len(batch.groups))
    for g in batch.groups:
        toks = [r.num_tokens for r in g.responses]
        want = [lengths(g.prompt_id, j) for j in range(group_size)]
        assert toks == want, f"{lane.policy} step {batch.step} {g.prompt_id}: {toks} != {want}"
        assert all(r.finish_reason == "length" for r in g.responses), g.prompt_id
    lane.delivered += [g.prompt_id for g in batch.groups]
    assert len(lane.delivered) == len(set(lane.delivered)), f"{lane.policy}: delivered twice"


def record(lane: Lane, batch: RolloutBatch, seq: int) -> None:
    plan, res = lane.recorder.captured[-1]
    assert plan.step == batch.step, (lane.policy, plan.step, batch.step)
    lane.steps.append(LiveStep(plan, res.outcome, batch.metrics.wall_s, loadavg(), seq))
    log(f"{lane.policy} step {plan.step}{' (flush)' if plan.is_flush else ''}: makespan "
        f"{res.outcome.makespan_s:.3f} s q={plan.q} m={plan.m} aborted={len(res.outcome.aborted)}")


async def run_interleaved(policies: list[str], endpoints: list[str], model: str,
                          lengths: ReplayLengths, prompts: list[PromptInput], groups: int,
                          group_size: int, steps: int, profile_path: str,
                          controller: dict[str, Any] | None = None,
                          ) -> dict[str, list[LiveStep]]:
    """``steps`` steps of every policy, interleaved (step t of each policy, then step t + 1; the
    order rotates by one policy every step, so none always runs first), then a flush of each
    policy that carries prompts. Every policy reads the prompts in the same order and uses the
    same controller profile and ``controller`` overrides (``q0``, ``m0``). Every batch is
    checked (``check_batch``)."""
    cfgs = {p: RolloutConfig(num_groups=groups, group_size=group_size, policy=p, model=model,
                             sampling=SamplingParams(max_tokens=1024, temperature=1.0, seed=0),
                             replay=lengths, request_timeout_s=600.0, profile=profile_path,
                             controller=dict(controller or {}))
            for p in policies}
    async with AsyncExitStack() as stack:
        lanes: list[Lane] = []
        seq = itertools.count()
        for p in policies:
            ro = await stack.enter_async_context(TailSieveRollout(endpoints, cfgs[p]))
            lanes.append(Lane(p, ro, Recorder(ro.executor), iter(prompts)))
        for t in range(steps):
            k = t % len(lanes)
            for lane in lanes[k:] + lanes[:k]:
                need = lane.ro.num_fresh_needed()
                batch = await lane.ro.step([next(lane.prompts) for _ in range(need)])
                check_batch(lane, batch, lengths, groups, group_size)
                record(lane, batch, next(seq))
        for lane in lanes:
            last = await lane.ro.flush()
            if last is not None:
                check_batch(lane, last, lengths, None, group_size)
                record(lane, last, next(seq))
    return {lane.policy: lane.steps for lane in lanes}


def plan_dict(plan: StepPlan) -> dict[str, Any]:
    return {
        "step": plan.step, "q": plan.q, "m": plan.m, "num_extra": plan.num_extra,
        "num_fresh_to_deliver": plan.num_fresh_to_deliver, "is_flush": plan.is_flush,
        "tail_replicas": list(plan.tail_replicas), "bulk_replicas": list(plan.bulk_replicas),
        "assignments": [
            {"prompt_id": a.prompt_id, "pool": a.pool.value, "replica": a.replica,
             "replicas": list(a.response_replicas(plan.group_size)), "pinned": a.pinned,
             "order": a.order}
            for a in plan.assignments
        ],
    }


def outcome_dict(o: StepOutcome) -> dict[str, Any]:
    return {
        "makespan_s": round(o.makespan_s, 4), "tail_time_s": round(o.tail_time_s, 4),
        "bulk_cut_s": round(o.bulk_cut_s, 4), "wasted_tokens": o.wasted_tokens,
        "generated_tokens": o.generated_tokens,
        "replica_busy_s": [round(b, 4) for b in o.replica_busy_s],
        "delivered": [{"prompt_id": g.prompt_id, "replica": g.replica, "pool": g.pool.value,
                       "completion_s": round(g.completion_s, 4),
                       "response_tokens": list(g.response_tokens)} for g in o.delivered],
        "aborted": [g.prompt_id for g in o.aborted],
    }
