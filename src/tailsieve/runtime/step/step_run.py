"""One step of the live executor while it runs: its groups, where they run, the events their
attempts send, and the step's own bookkeeping (the cutoff, a displaced group's new replica,
whether the step is done). ``runtime.step.executor`` launches the attempts and handles the events.

Replica indices here are the plan's; ``active[j]`` is the executor replica serving plan
replica ``j`` (its health, in ``runtime.execution.health``, is the executor's).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.running_index import RunningIndex
from tailsieve.errors import StepFailedError
from tailsieve.runtime.engine.backends import Response
from tailsieve.runtime.execution.chain import ResponseChain
from tailsieve.runtime.execution.health import ReplicaHealth
from tailsieve.runtime.step.chain_attempt import ChainedAttempt
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.live_moves import LiveResponse
from tailsieve.runtime.step.rebalancer import LiveRebalancer
from tailsieve.runtime.step.step_state import GroupRun, StepResult, build_result
from tailsieve.runtime.step.waste import WasteCounter

__all__ = ["Event", "StepRun"]


@dataclass(frozen=True, slots=True)
class Event:
    """How a group's attempt ended: ``done`` with its responses; ``fail``, a request failed
    (the step fails). A replica fault ends no attempt: its responses go on elsewhere
    (``relocated``: the step's progress is reported again, its replicas' health changed)."""

    kind: Literal["done", "fail", "relocated"]
    prompt_id: str
    responses: tuple[Response, ...] = ()
    error: BaseException | None = None


@dataclass(slots=True)
class StepRun:
    """The state of the step running now (``LiveExecutor.run``)."""

    plan: StepPlan
    t0: float  # the event loop's time at the step's start
    queue: asyncio.Queue[Event]
    active: list[int]  # plan replica index -> executor replica
    health: ReplicaHealth  # the executor's replicas
    groups: dict[str, GroupRun] = field(default_factory=dict)
    cut_s: float | None = None
    num_fresh_done: int = 0
    num_regenerated: int = 0  # groups sent as one request with n, restarted after a fault
    busy_until_s: list[float] = field(init=False)  # plan replica -> its last work, seconds
    chains: dict[str, list[ResponseChain]] = field(default_factory=dict)
    attempts: dict[str, ChainedAttempt] = field(default_factory=dict)
    rebalancer: LiveRebalancer | None = None
    balance_error: str | None = None  # the rebalancer's crash in this step (moves then off)
    index: RunningIndex | None = None  # the running responses by replica (re-balancing)
    config: ExecutorConfig | None = None  # this step's attempts' config (None: the executor's)

    def __post_init__(self) -> None:
        self.busy_until_s = [0.0] * len(self.active)

    def now(self) -> float:
        """Seconds since the step started."""
        return asyncio.get_running_loop().time() - self.t0

    def url(self, replica: int) -> str:
        """The address of plan replica ``replica``."""
        return self.health.urls[self.active[replica]]

    def ok(self, replica: int) -> bool:
        """Whether plan replica ``replica`` is in service."""
        return self.health.healthy[self.active[replica]]

    def busy_until(self, replicas: set[int] | tuple[int, ...], t_s: float) -> None:
        """``replicas`` were busy at least until ``t_s``."""
        for r in replicas:
            self.busy_until_s[r] = max(self.busy_until_s[r], t_s)

    def unindex(self, g: GroupRun) -> None:
        """Group ``g`` stopped running (done or cut): its responses leave the index."""
        att = self.attempts.get(g.assignment.prompt_id)
        if self.index is not None and att is not None:
            self.index.drop_owner(att)

    def place_off(self, g: GroupRun, dead: int) -> None:
        """Re-place the responses a group had on replica ``dead`` onto a healthy one."""
        new = self.pick(g.assignment)
        g.replicas = tuple(new if r == dead else r for r in g.replicas)

    def reseat(self, g: GroupRun, sample: int, replica: int) -> None:
        """Response ``sample`` of group ``g`` continues on ``replica``."""
        g.replicas = tuple(replica if j == sample else r for j, r in enumerate(g.replicas))

    def pick(self, a: GroupAssignment) -> int:
        """A healthy replica for a displaced group: same pool first, fewest running groups."""
        plan = self.plan
        pool = plan.tail_replicas if a.pool is Pool.TAIL else plan.bulk_replicas
        healthy = [i for i in range(len(self.active)) if self.ok(i)]
        if not healthy:
            reasons = "; ".join(f"{self.url(i)}: {self.health.last_error[self.active[i]]}"
                                for i in range(len(self.active)))
            raise StepFailedError(
                f"step {plan.step}: no healthy replica left for prompt "
                f"{a.prompt_id!r} ({reasons})"
            )
        same = [i for i in healthy if i in pool] or healthy
        load = {i: 0 for i in same}
        for g in self.groups.values():
            if g.status == "running":
                for r in g.replicas:
                    if r in load:
                        load[r] += 1
        return min(same, key=lambda i: (load[i], i))

    def done(self, g: GroupRun, responses: tuple[Response, ...]) -> None:
        """Group ``g`` completed with ``responses``; the fresh cutoff falls when it was the
        last fresh group the batch needs."""
        now = self.now()
        g.status, g.completion_s, g.responses = "done", now, responses
        self.unindex(g)
        self.busy_until(set(g.replicas), now)
        if self.plan.is_abortable(g.assignment):
            self.num_fresh_done += 1
            if self.num_fresh_done == self.plan.num_fresh_to_deliver:
                self.cut()

    def cut(self) -> None:
        """The fresh cutoff: every fresh group still running is aborted."""
        self.cut_s = self.now()
        for g in self.groups.values():
            if g.status == "running" and self.plan.is_abortable(g.assignment):
                if g.task is not None:
                    g.task.cancel()
                g.status = "aborted"
                g.completion_s = self.cut_s
                self.unindex(g)
                self.busy_until(set(g.replicas), self.cut_s)

    def finished(self) -> bool:
        """The batch is complete: the fresh groups it needs and every group always waited
        for are done."""
        if self.num_fresh_done < self.plan.num_fresh_to_deliver:
            return False
        return all(
            g.status == "done"
            for g in self.groups.values()
            if not self.plan.is_abortable(g.assignment)
        )

    def running_responses(self, at_s: float | None = None) -> list[LiveResponse]:
        """Continuation mode: every response still generating, where it runs (plan replica)
        and the context tokens known (prompt + generated up to its last seam + what its
        running piece streamed); running pieces' ages as of ``at_s`` (seconds on the step's
        clock; default now)."""
        tails = set(self.plan.tail_replicas)
        now = asyncio.get_running_loop().time() if at_s is None else self.t0 + at_s
        out = []
        for pid, att in self.attempts.items():
            g = self.groups[pid]
            if g.status != "running":
                continue
            dealt = tuple(sorted(g.assignment.all_replicas))
            for i, rt in enumerate(att.turns):
                if rt.chain.final is not None:
                    continue
                rep = rt.replica
                ctx = rt.prefix_tokens + (rt.streamed_tokens if rt.piece_on is not None else 0)
                out.append(LiveResponse(pid, i, rep, ctx, rt.prompt_tokens, dealt,
                                        int(rep in tails), att.running_piece(i, now)))
        return out

    def result(self, waste: WasteCounter, num_relocations: int) -> StepResult:
        """The step's outcome and delivered responses."""
        return build_result(self.plan, self.groups, self.cut_s, self.num_regenerated,
                            self.busy_until_s, waste, self.t0, num_relocations)
