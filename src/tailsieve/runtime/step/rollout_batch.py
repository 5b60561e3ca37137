"""What a live rollout's step hands the trainer (``TailSieveRollout.step``): the delivered
groups and the step's metrics (``StepMetrics``), from the plan, the executor's result and its
record of the step."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tailsieve.core.plan import StepPlan
from tailsieve.core.timeline import StepTimeline
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.observe import StepMetrics, waste_fields
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import GroupResponses, StepResult


@dataclass(frozen=True, slots=True)
class RolloutBatch:
    """One delivered batch: ``groups`` in plan order (tail, carried, fresh), plus metrics."""

    step: int
    groups: tuple[GroupResponses, ...]
    metrics: StepMetrics
    timeline: StepTimeline | None = None  # per-replica spans of this step (for plots)

    @classmethod
    def of(cls, plan: StepPlan, result: StepResult, active: Sequence[int],
           metrics: StepMetrics) -> RolloutBatch:
        """The batch of a step whose plan replica ``j`` ran on executor replica
        ``active[j]``: its groups' replicas are the executor's."""
        out = result.outcome
        groups = tuple(
            dataclasses.replace(
                d := result.groups[g.prompt_id],
                replica=active[d.replica],
                replicas=tuple(active[r] for r in d.replicas),
            )
            for g in out.delivered
        )
        return cls(step=plan.step, groups=groups, metrics=metrics,
                   timeline=StepTimeline.from_step(plan, out))

    def rows(self) -> Iterator[dict[str, Any]]:
        """One dict per response (for JSONL export); ``replica`` is the replica that response
        ran on (executor index, as in the launch state file), ``home_replica`` its group's."""
        for g in self.groups:
            for i, r in enumerate(g.responses):
                yield {
                    "prompt_id": g.prompt_id,
                    "sample": i,
                    "text": r.text,
                    "response_tokens": r.num_tokens,
                    "finish_reason": r.finish_reason,
                    "pool": g.pool.value,
                    "replica": g.response_replica(i),
                    "home_replica": g.replica,
                    "attempt": g.attempt,
                }


def step_metrics(plan: StepPlan, result: StepResult, config: RolloutConfig,
                 executor: LiveExecutor, *, wall_s: float, flush: bool,
                 num_planned_replicas: int, num_carried_next: int,
                 profile: ThroughputModel) -> StepMetrics:
    """The metrics of a step just run by ``executor`` (its record of the step: moves, the
    rebalancer's crash, the replicas' health), planned with cost model ``profile``."""
    out = result.outcome
    moves = executor.last_moves
    return StepMetrics(
        step=plan.step,
        policy=config.policy,
        num_groups=len(out.delivered),
        q=plan.q,
        m=plan.m,
        makespan_s=out.makespan_s,
        tail_time_s=out.tail_time_s,
        bulk_cut_s=out.bulk_cut_s,
        wall_s=wall_s,
        num_launched=plan.num_launched,
        num_aborted=len(out.aborted),
        num_regenerated=out.num_regenerated,
        generated_tokens=out.generated_tokens,
        wasted_tokens=out.wasted_tokens,
        estimated_wasted_tokens=out.estimated_wasted_tokens,
        delivered_tokens=sum(g.total_tokens for g in out.delivered),
        num_carried_next=num_carried_next,
        num_healthy_replicas=sum(executor.healthy),
        is_flush=flush,
        num_planned_replicas=num_planned_replicas,
        num_readmitted=executor.num_readmitted,
        num_moves=moves.num_moves,
        moved_tokens=moves.moved_tokens,
        prefill_tokens=moves.prefill_tokens,
        prefill_s=moves.prefill_s,
        num_relocated=out.num_relocated,
        moves=config.moves_active and plan.balance is not None,
        num_rebalancer_errors=int(executor.last_balance_error is not None),
        rebalancer_error=executor.last_balance_error,
        **waste_fields(out.waste),
        moves_off_reason=config.moves_off_reason or "",
        profile=profile.name,
        profile_fitted=profile.provenance.get("kind") == "online-fit",
    )
