"""The TailSieve step protocol (docs/design.md, "One step"), pure: no I/O, no clock.

``plan_step`` turns (carried candidates, controller targets, prompt stream) into a
``StepPlan``; an executor runs it; ``update_from_outcome`` checks the invariants, ranks the
aborted groups into the next candidate set and feeds the controller. Within a pool, groups are
dealt round-robin whole, or (``ControlTargets.spread``) response by response; m = 0 with c = 0
and spread is the "balance" step. See docs/protocol.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tailsieve.core.controller import Controller
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ConfigError, ProtocolError


@dataclass(frozen=True, slots=True)
class ProtocolConfig:
    """Shape of every step."""

    num_replicas: int  # R
    num_groups: int  # N: groups per delivered batch
    group_size: int  # n: responses per group

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ConfigError(f"num_replicas must be >= 1, got {self.num_replicas}")
        if self.num_groups < 1:
            raise ConfigError(f"num_groups must be >= 1, got {self.num_groups}")
        if self.group_size < 1:
            raise ConfigError(f"group_size must be >= 1, got {self.group_size}")


class RolloutProtocol:
    """Plans steps and consumes their outcomes; owns the ranked candidate set."""

    def __init__(self, config: ProtocolConfig, controller: Controller) -> None:
        self.config = config
        self.controller = controller
        self.step = 0
        self.candidates: list[str] = []  # prompts aborted last step, most-likely-long first
        self._open: StepPlan | None = None

    @property
    def has_carried(self) -> bool:
        return bool(self.candidates)

    def num_fresh_needed(self) -> int:
        """Fresh prompts the next ``plan_step`` will draw (useful for callers feeding prompts)."""
        shape = self._shape(flush=False)
        return shape[4] + shape[5]

    def num_fresh_to_deliver(self) -> int:
        """Of ``num_fresh_needed``, the fresh prompts the next step must deliver (the rest are
        the extra groups the tail pool starts beyond them, which it may do without)."""
        return self._shape(flush=False)[4]

    def set_num_replicas(self, num_replicas: int) -> None:
        """Plan the coming steps for ``num_replicas`` serving replicas (one failed or came
        back); the controller re-plans its split. Only between steps."""
        if self._open is not None:
            raise ProtocolError("cannot change the replica count in the middle of a step")
        if num_replicas == self.config.num_replicas:
            return
        self.config = replace(self.config, num_replicas=num_replicas)
        self.controller.resize(num_replicas)

    def _shape(self, flush: bool) -> tuple[int, int, int, int, int, int]:
        cfg, cands = self.config, self.candidates
        t = self.controller.targets()
        m = min(max(t.m, 0), cfg.num_replicas - 1) if self.step > 0 else 0
        q = min(max(t.q, 0), len(cands)) if m > 0 else 0
        if q == 0:
            m = 0
        p = len(cands) - q
        if p > cfg.num_groups - q:
            raise ProtocolError(
                f"step {self.step}: {len(cands)} carried candidates exceed the batch of "
                f"{cfg.num_groups} groups"
            )
        if flush:
            return q, m, len(cands), p, 0, 0
        fresh_deliver = cfg.num_groups - q - p
        extra = max(0, t.num_extra) if fresh_deliver > 0 else 0
        return q, m, len(cands), p, fresh_deliver, extra

    def plan_step(self, stream: PromptStream, flush: bool = False) -> StepPlan:
        """Plan the next step, drawing fresh prompts from ``stream`` (none when ``flush``)."""
        if self._open is not None:
            raise ProtocolError(f"step {self._open.step} was planned but its outcome not consumed")
        cfg = self.config
        q, m, _, p, fresh_deliver, extra = self._shape(flush)
        targets = self.controller.targets()
        spread = targets.spread
        fresh = stream.draw(fresh_deliver + extra)
        fresh_deliver = min(fresh_deliver, len(fresh))
        extra = len(fresh) - fresh_deliver
        num_bulk = cfg.num_replicas - m
        tail_replicas = tuple(range(num_bulk, cfg.num_replicas))
        bulk_replicas = tuple(range(num_bulk))
        orders = [0] * cfg.num_replicas
        out: list[GroupAssignment] = []

        n = cfg.group_size

        def deal(
            ids: list[str], pool: Pool, replicas: tuple[int, ...], pinned: bool, k0: int
        ) -> int:
            """Round-robin from slot ``k0``: whole groups, or (spread) single responses."""
            k = k0
            for pid in ids:
                if spread:
                    where = tuple(replicas[(k + j) % len(replicas)] for j in range(n))
                    r = where[0]
                    out.append(GroupAssignment(pid, pool, r, pinned, orders[r], where))
                    for x in set(where):
                        orders[x] += 1
                    k += n
                else:
                    r = replicas[k % len(replicas)]
                    out.append(GroupAssignment(pid, pool, r, pinned, orders[r]))
                    orders[r] += 1
                    k += 1
            return k

        deal(self.candidates[:q], Pool.TAIL, tail_replicas, True, 0)
        k = deal(self.candidates[q:], Pool.BULK, bulk_replicas, True, 0)
        deal(fresh, Pool.BULK, bulk_replicas, False, k)
        plan = StepPlan(
            step=self.step,
            num_replicas=cfg.num_replicas,
            group_size=cfg.group_size,
            num_required=q + p + fresh_deliver,
            q=q,
            m=m,
            num_extra=extra,
            tail_replicas=tail_replicas,
            bulk_replicas=bulk_replicas,
            assignments=tuple(out),
            num_fresh_to_deliver=fresh_deliver,
            fresh_prompt_ids=tuple(fresh),
            is_warmup=self.step == 0,
            is_flush=flush,
            balance=targets.balance,
        )
        self._open = plan
        return plan

    def update_from_outcome(self, plan: StepPlan, outcome: StepOutcome) -> None:
        """Check the step's invariants, rank its aborted groups, and feed the controller."""
        if self._open is None or plan is not self._open:
            raise ProtocolError("outcome does not belong to the open step plan")
        validate_outcome(plan, outcome)
        order = {a.prompt_id: i for i, a in enumerate(plan.assignments)}
        ranked = sorted(
            outcome.aborted, key=lambda g: (g.evidence, -order[g.prompt_id]), reverse=True
        )
        self.candidates = [g.prompt_id for g in ranked]
        self.controller.observe(plan, outcome)
        self._open = None
        self.step += 1

    def abandon_step(self, plan: StepPlan) -> None:
        """Drop the open plan after its step failed. Candidates and controller are unchanged,
        so the next ``plan_step`` re-plans the same carried prompts; the caller must hand the
        plan's fresh prompts back to its stream (they were never delivered)."""
        if self._open is None or plan is not self._open:
            raise ProtocolError("abandon_step: that plan is not the open step")
        self._open = None

    def state_dict(self) -> dict[str, Any]:
        """Candidates, step index and controller state (JSON-serialisable)."""
        if self._open is not None:
            raise ProtocolError("cannot checkpoint in the middle of a step")
        return {
            "step": self.step,
            "candidates": list(self.candidates),
            "controller": self.controller.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.candidates = [str(c) for c in state["candidates"]]
        self.controller.load_state_dict(state["controller"])
        self._open = None


def validate_outcome(plan: StepPlan, outcome: StepOutcome) -> None:
    """Raise ``ProtocolError`` unless the outcome keeps every step invariant."""
    if outcome.step != plan.step:
        raise ProtocolError(f"outcome is for step {outcome.step}, plan for step {plan.step}")
    launched = {a.prompt_id: a for a in plan.assignments}
    if len(launched) != len(plan.assignments):
        raise ProtocolError(f"step {plan.step}: a prompt was launched twice")
    delivered = outcome.delivered_ids
    aborted = [g.prompt_id for g in outcome.aborted]
    seen: set[str] = set()
    for pid in (*delivered, *aborted):
        if pid in seen:
            raise ProtocolError(f"step {plan.step}: prompt {pid!r} reported twice")
        if pid not in launched:
            raise ProtocolError(f"step {plan.step}: prompt {pid!r} was not in the plan")
        seen.add(pid)
    if seen != set(launched):
        missing = sorted(set(launched) - seen)[:5]
        raise ProtocolError(
            f"step {plan.step}: prompts lost (neither delivered nor aborted): {missing}"
        )
    for pid in aborted:
        if not plan.is_abortable(launched[pid]):
            raise ProtocolError(f"step {plan.step}: pinned or tail prompt {pid!r} was aborted")
    if len(delivered) != plan.num_required:
        raise ProtocolError(
            f"step {plan.step}: delivered {len(delivered)} groups, the batch needs {plan.num_required}"
        )
    for g in outcome.delivered:
        if len(g.response_tokens) != plan.group_size:
            raise ProtocolError(
                f"step {plan.step}: group {g.prompt_id!r} has {len(g.response_tokens)} responses, "
                f"expected {plan.group_size}"
            )
