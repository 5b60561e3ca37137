"""Per-step bookkeeping of the live executor and what it hands back to the caller."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tailsieve.core.outcome import AbortedGroup, GroupResult, StepOutcome
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.runtime.engine.backends import Response
from tailsieve.runtime.step.waste import AttemptProgress, AttemptWaste, WasteCounter, split_waste


@dataclass(slots=True)
class GroupRun:
    """Mutable state of one group during a step (its current attempt)."""

    assignment: GroupAssignment
    replicas: tuple[int, ...]  # where each response runs now
    attempt: int = 0  # 0 = first; +1 each time a fault restarts it as one request with n
    status: str = "running"  # running | done | aborted
    completion_s: float = 0.0  # done: last response finished; aborted: the cutoff
    responses: tuple[Response, ...] = ()
    progress: AttemptProgress = field(default_factory=AttemptProgress)
    task: asyncio.Task[None] | None = None

    @property
    def replica(self) -> int:
        """The (home) replica of the current attempt: its first response's."""
        return self.replicas[0]


@dataclass(frozen=True, slots=True)
class GroupResponses:
    """The delivered responses of one group (one complete attempt), in sample order."""

    prompt_id: str
    responses: tuple[Response, ...]
    pool: Pool
    replica: int  # home replica of the delivered attempt (its first response's)
    attempt: int
    completion_s: float
    replicas: tuple[int, ...] = ()  # replica each response ran on (delivered attempt)

    def response_replica(self, sample: int) -> int:
        """The replica that generated response ``sample``."""
        return self.replicas[sample] if self.replicas else self.replica


@dataclass(frozen=True, slots=True)
class StepResult:
    """What ``LiveExecutor.run`` returns: the protocol's outcome plus the generated data."""

    outcome: StepOutcome
    groups: dict[str, GroupResponses]  # delivered groups by prompt id


@dataclass(frozen=True, slots=True)
class StepProgress:
    """A snapshot for progress displays and metrics."""

    step: int
    elapsed_s: float
    num_tail_done: int
    num_tail: int
    num_bulk_done: int  # bulk groups completed (pinned + fresh)
    num_bulk_needed: int  # pinned bulk + fresh to deliver
    num_aborted: int
    cut_s: float | None
    q: int
    m: int
    healthy: tuple[bool, ...]

    @classmethod
    def of(
        cls,
        plan: StepPlan,
        groups: Mapping[str, GroupRun],
        cut_s: float | None,
        elapsed_s: float,
        healthy: tuple[bool, ...],
    ) -> StepProgress:
        tail = [g for g in groups.values() if g.assignment.pool is Pool.TAIL]
        bulk = [g for g in groups.values() if g.assignment.pool is Pool.BULK]
        pinned_bulk = sum(1 for g in bulk if g.assignment.pinned)
        return cls(
            step=plan.step,
            elapsed_s=elapsed_s,
            num_tail_done=sum(g.status == "done" for g in tail),
            num_tail=len(tail),
            num_bulk_done=sum(g.status == "done" for g in bulk),
            num_bulk_needed=pinned_bulk + plan.num_fresh_to_deliver,
            num_aborted=sum(g.status == "aborted" for g in groups.values()),
            cut_s=cut_s,
            q=plan.q,
            m=plan.m,
            healthy=healthy,
        )


def build_result(
    plan: StepPlan,
    groups: Mapping[str, GroupRun],
    cut_s: float | None,
    num_regenerated: int,
    busy_until_s: Sequence[float],
    waste: WasteCounter,
    t0: float = 0.0,
    num_relocated: int = 0,
) -> StepResult:
    """Fill ``StepOutcome`` (in plan order) and the delivered responses. ``num_regenerated``:
    groups sent as one request with ``n`` that a fault restarted elsewhere; ``t0``: the step's
    start on the loop clock. Wasted tokens are counted by ``waste`` and split into cutoff
    aborts and tokens lost to faults or moves, exact and estimated (``runtime.step.waste``).
    ``num_relocated``: responses continued (or, without continuation, restarted) on another
    replica after a fault."""
    delivered: list[GroupResult] = []
    aborted: list[AbortedGroup] = []
    data: dict[str, GroupResponses] = {}
    attempts = [g.progress for g in groups.values()]
    waste.learn(attempts)
    # pieces lost to a fault (or dropped by a move) are decoded again
    lost_to_faults = [waste.count_lost(p) for p in attempts if p.lost]
    at_cutoff: list[AttemptWaste] = []
    for a in plan.assignments:
        g = groups[a.prompt_id]
        if g.status == "done":
            delivered.append(
                GroupResult(
                    prompt_id=a.prompt_id,
                    pool=a.pool,
                    replica=g.replica,
                    completion_s=g.completion_s,
                    response_tokens=tuple(r.num_tokens for r in g.responses),
                    finish_reasons=tuple(r.finish_reason for r in g.responses),
                    attempt=g.attempt,
                )
            )
            data[a.prompt_id] = GroupResponses(
                a.prompt_id,
                g.responses,
                a.pool,
                g.replica,
                g.attempt,
                g.completion_s,
                g.replicas,
            )
        elif g.status == "aborted":
            p = g.progress
            w = waste.count(p, t0 + (cut_s or g.completion_s))
            at_cutoff.append(w)
            aborted.append(
                AbortedGroup(
                    prompt_id=a.prompt_id,
                    replica=g.replica,
                    num_finished=p.num_finished,
                    finished_tokens=p.finished_tokens,
                    tokens_so_far=p.tokens_so_far,
                    wasted_tokens=w.total,
                    estimated_tokens=w.estimated,
                )
            )
    tail_times = [r.completion_s for r in delivered if r.pool is Pool.TAIL]
    bulk_times = [r.completion_s for r in delivered if r.pool is Pool.BULK]
    tail_time_s = max(tail_times, default=0.0)
    bulk_cut_s = max([*bulk_times, cut_s or 0.0], default=0.0)
    produced = sum(r.total_tokens for r in delivered)
    split = split_waste(at_cutoff, lost_to_faults)
    outcome = StepOutcome(
        step=plan.step,
        delivered=tuple(delivered),
        aborted=tuple(aborted),
        tail_time_s=tail_time_s,
        bulk_cut_s=bulk_cut_s,
        makespan_s=max(tail_time_s, bulk_cut_s),
        wasted_tokens=split.total,
        generated_tokens=produced + split.total,
        num_regenerated=num_regenerated,
        replica_busy_s=tuple(busy_until_s),
        estimated_wasted_tokens=split.estimated,
        num_relocated=num_relocated,
        waste=split,
    )
    return StepResult(outcome=outcome, groups=data)
