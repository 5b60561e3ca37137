"""A step plan: which group runs where, and when the bulk pool is cut off.

Produced by ``RolloutProtocol.plan_step`` (pure); executed unchanged by the simulated and the
live executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.pool import Pool
from tailsieve.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """One group (one prompt, ``group_size`` responses) placed on one replica."""

    prompt_id: str  # the prompt this group regenerates from scratch
    pool: Pool  # tail or bulk
    replica: int  # global replica index in 0..num_replicas-1
    pinned: bool  # carried candidate: must be delivered this step, never aborted
    order: int  # dispatch position on its (home) replica (FCFS order), 0-based
    replicas: tuple[int, ...] = ()  # spread group: replica of each response; () = all on replica

    def __post_init__(self) -> None:
        if self.replicas and self.replicas[0] != self.replica:
            raise ProtocolError(
                f"group {self.prompt_id!r}: first response on replica {self.replicas[0]}, "
                f"home replica {self.replica}"
            )

    def response_replicas(self, group_size: int) -> tuple[int, ...]:
        """Replica of each of the group's ``group_size`` responses."""
        if not self.replicas:
            return (self.replica,) * group_size
        if len(self.replicas) != group_size:
            raise ProtocolError(
                f"group {self.prompt_id!r} places {len(self.replicas)} responses, "
                f"the group has {group_size}"
            )
        return self.replicas

    @property
    def all_replicas(self) -> frozenset[int]:
        """Every replica the group runs on."""
        return frozenset(self.replicas or (self.replica,))


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Everything an executor needs to run one synchronous rollout step."""

    step: int  # step index, 0 = warm-up
    num_replicas: int  # R
    group_size: int  # n responses per group
    num_required: int  # N: groups in the delivered batch (fewer only in the final flush)
    q: int  # tail groups this step (effective: at most the carried candidates)
    m: int  # tail replicas this step (0 = uniform routing over all replicas)
    num_extra: int  # c: fresh bulk groups launched beyond what the batch needs
    tail_replicas: tuple[int, ...]  # replica indices of the tail pool
    bulk_replicas: tuple[int, ...]  # replica indices of the bulk pool
    assignments: tuple[GroupAssignment, ...]  # every group launched this step
    num_fresh_to_deliver: int  # bulk cutoff: abort the rest after this many fresh completions
    fresh_prompt_ids: tuple[str, ...]  # prompts newly drawn from the stream this step
    is_warmup: bool  # step 0: no candidates yet, uniform over all replicas
    is_flush: bool  # final step: drains the carried candidates, draws nothing
    balance: BalanceSettings | None = None  # re-balance running responses by moves (None: off)

    @property
    def num_launched(self) -> int:
        return len(self.assignments)

    @property
    def pinned_ids(self) -> tuple[str, ...]:
        return tuple(a.prompt_id for a in self.assignments if a.pinned)

    @property
    def carried_in_bulk_ids(self) -> tuple[str, ...]:
        """Surplus candidates pinned in the bulk pool (the step waits for them)."""
        return tuple(a.prompt_id for a in self.assignments if a.pinned and a.pool is Pool.BULK)

    @property
    def tail_ids(self) -> tuple[str, ...]:
        return tuple(a.prompt_id for a in self.assignments if a.pool is Pool.TAIL)

    def is_abortable(self, a: GroupAssignment) -> bool:
        """Only fresh bulk groups can be aborted at the cutoff."""
        return a.pool is Pool.BULK and not a.pinned
