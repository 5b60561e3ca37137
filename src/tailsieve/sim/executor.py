"""``SimExecutor``: run a ``StepPlan`` on simulated replicas and return a ``StepOutcome``.

Semantics (docs/design.md, "One step"): every group of the plan is launched at t = 0 on its replica in
dispatch order (one group = ``group_size`` requests, FCFS when a running cap queues them; a
spread group's requests sit on several replicas, ``GroupAssignment.replicas``). The
delivered batch is every tail group, every pinned group and the first ``num_fresh_to_deliver``
fresh bulk groups to complete (a group completes with its last response; ties at one instant go
by plan order). At that cutoff moment every other fresh bulk group is aborted; the aborted
attempt's tokens are wasted. Pinned and tail groups are never aborted, and keep running after
the cutoff on a lighter replica. ``bulk_cut_s = max(cutoff, last pinned completion)``,
``tail_time_s`` = last tail completion, ``makespan_s`` = the larger.

Two equivalent engines: where nothing can queue on any replica (no running cap reached, no
prefill, a KV capacity that cannot bind: ``replica_time.capacity_cannot_bind``) the closed
form of ``all_admit_completion_times`` is used per replica and the cutoff is computed
analytically (``sim.fastpath``); otherwise a global event loop drives one ``ReplicaEngine`` per
replica from event to event (``sim.eventpath``), never token by token.
A plan with ``balance`` settings (the ``tailsieve`` policy's balance steps) runs on the event
engine with re-balance checks and moves by continuation (``sim.movepath``, ``core.balancer``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailsieve.core.balance_trace import BalanceTrace
from tailsieve.core.outcome import AbortedGroup, GroupResult, StepOutcome
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.errors import ProtocolError
from tailsieve.model.replica_time import capacity_cannot_bind
from tailsieve.sim.cutoff_work import work_at_cutoff
from tailsieve.sim.eventpath import simulate_events
from tailsieve.sim.fastpath import simulate_closed_form
from tailsieve.sim.layout import RequestLayout
from tailsieve.sim.movepath import MoveStats, Piece, PieceSettings, simulate_with_moves
from tailsieve.sim.replicas import PoolConfigs

LengthsFn = Callable[[str, int], "Sequence[int] | npt.NDArray[np.int64]"]
"""``(prompt_id, step) -> group_size`` response lengths of that prompt's attempt at that step."""
PromptTokensFn = Callable[[str], int]
"""``prompt_id -> prompt tokens`` (prefill cost)."""
DraftFactorFn = Callable[[int, int, int], float]
"""``(request, src, dst) -> rho``: verify steps per token on ``dst`` over ``src``."""


class MoveHook(Protocol):
    """What a caller adds to the steps that re-balance (``plan.balance``): a price on each
    move and a look at where every response ran (the speculation runs, ``sim.spec_runs``)."""

    def draft_factor(self, layout: RequestLayout) -> DraftFactorFn | None:
        """How many times as many verify steps per token a moved response takes on its
        destination (``core.balance_drafts``); None: moves are not priced by drafts."""
        ...

    def observe(self, layout: RequestLayout, pieces: Sequence[Sequence[Piece]]) -> None:
        """Each request's chain of pieces ``(replica, first token, end token)`` in the step."""
        ...


@dataclass(frozen=True, slots=True)
class GroupSpan:
    """Where one launched group ran and when it ended (for timelines)."""

    prompt_id: str
    replica: int
    pool: Pool
    end_s: float  # completion, or the cutoff for an aborted group
    delivered: bool


@dataclass(frozen=True, slots=True)
class SimStepResult:
    """The outcome plus the per-group spans the plots use."""

    outcome: StepOutcome
    spans: tuple[GroupSpan, ...]
    cutoff_s: float  # the moment the fresh bulk groups were cut off
    work_at_cutoff: tuple[tuple[float, float], ...] = ()  # per replica (A_r, D_r), cutoff_work


class SimExecutor:
    """Executes plans on simulated replicas; pure and deterministic."""

    def __init__(self, pools: PoolConfigs, force_event_driven: bool = False,
                 pieces: PieceSettings | None = None, trace_checks: bool = False,
                 move_hook: MoveHook | None = None) -> None:
        """``pieces``: continued responses run as bounded pieces, as the live runtime with
        ``piece_tokens`` does (applies to plans with balance settings; None: one piece until
        moved); ``move_hook``: prices moves and observes the pieces of re-balanced steps."""
        self.pools = pools
        self.force_event_driven = force_event_driven
        self.pieces = pieces
        self.move_hook = move_hook
        self.trace_checks = trace_checks  # record each check in ``last_trace``
        self.last_trace: BalanceTrace | None = None  # the last re-balanced step's checks

    def run(
        self,
        plan: StepPlan,
        lengths: LengthsFn,
        prompt_tokens: PromptTokensFn | None = None,
    ) -> StepOutcome:
        """Run one step; ``lengths(prompt_id, plan.step)`` gives each group's response lengths."""
        return self.run_detailed(plan, lengths, prompt_tokens).outcome

    def run_detailed(
        self,
        plan: StepPlan,
        lengths: LengthsFn,
        prompt_tokens: PromptTokensFn | None = None,
    ) -> SimStepResult:
        """Like ``run`` and also returns where and until when each group ran."""
        layout = RequestLayout.build(plan, lengths, prompt_tokens)
        configs = [
            self.pools.for_replica(r, plan.tail_replicas) for r in range(plan.num_replicas)
        ]
        k = plan.num_fresh_to_deliver
        num_fresh = int(layout.fresh.sum())
        if k > num_fresh:
            raise ProtocolError(
                f"step {plan.step}: plan needs {k} fresh bulk groups but launches {num_fresh}"
            )
        moves: MoveStats | None = None
        closed = plan.balance is None and not self.force_event_driven and all(
            capacity_cannot_bind(
                layout.lengths[idx], configs[r],
                None if prompt_tokens is None else layout.prompt_tokens[idx],
            )
            for r, idx in enumerate(layout.replica_requests)
        )
        if plan.balance is not None:
            self.last_trace = BalanceTrace() if self.trace_checks else None
            hook = self.move_hook
            res, moves = simulate_with_moves(
                layout, configs, k, plan.balance, keep_pieces=hook is not None,
                tail_replicas=plan.tail_replicas, pieces=self.pieces, trace=self.last_trace,
                draft_factor=None if hook is None else hook.draft_factor(layout))
            if hook is not None:
                hook.observe(layout, moves.pieces)
        elif closed:
            res = simulate_closed_form(layout, configs, k)
        else:
            res = simulate_events(layout, configs, k)
        out = _assemble(plan, layout, res.done_s, res.tokens_so_far, res.delivered_fresh,
                        res.cutoff_s)
        if res.num_preemptions:
            out = SimStepResult(
                replace(out.outcome, num_preemptions=res.num_preemptions,
                        recomputed_tokens=res.recomputed_tokens,
                        replica_preemptions=res.replica_preemptions),
                out.spans, out.cutoff_s, out.work_at_cutoff,
            )
        if moves is not None and moves.num_moves:
            o, dropped = out.outcome, moves.dropped_tokens  # decoded, then dropped by a move
            out = SimStepResult(
                replace(o, num_moves=moves.num_moves, moved_tokens=moves.moved_tokens,
                        prefill_s=moves.prefill_s, wasted_tokens=o.wasted_tokens + dropped,
                        generated_tokens=o.generated_tokens + dropped),
                out.spans, out.cutoff_s, out.work_at_cutoff,
            )
        return out


def _assemble(
    plan: StepPlan,
    layout: RequestLayout,
    done_s: npt.NDArray[np.float64],
    tokens_so_far: npt.NDArray[np.int64],
    delivered_fresh: npt.NDArray[np.bool_],
    cutoff_s: float,
) -> SimStepResult:
    """Turn per-request completion times into the ``StepOutcome``."""
    n = plan.group_size
    groups: Sequence[GroupAssignment] = layout.groups
    done = done_s.reshape(len(groups), n) if groups else done_s.reshape(0, n)
    lens = layout.lengths.reshape(len(groups), n) if groups else layout.lengths.reshape(0, n)
    so_far = tokens_so_far.reshape(done.shape)
    aborted_mask = layout.fresh & ~delivered_fresh
    delivered: list[tuple[int, GroupResult]] = []
    aborted: list[tuple[int, AbortedGroup]] = []
    spans: list[GroupSpan] = []
    busy = np.zeros(plan.num_replicas)
    tail_time = pinned_last = 0.0
    wasted = generated = 0
    for gi, a in enumerate(groups):
        if aborted_mask[gi]:
            fin = done[gi] <= cutoff_s
            fin_tokens = int(lens[gi][fin].sum())
            partial = int(so_far[gi][~fin].sum())
            waste = fin_tokens + partial
            aborted.append((int(layout.plan_index[gi]), AbortedGroup(
                prompt_id=a.prompt_id, replica=a.replica, num_finished=int(fin.sum()),
                finished_tokens=fin_tokens, tokens_so_far=partial, wasted_tokens=waste,
            )))
            wasted += waste
            generated += waste
            for r in a.all_replicas:
                busy[r] = max(busy[r], cutoff_s)
            spans.append(GroupSpan(a.prompt_id, a.replica, a.pool, cutoff_s, False))
            continue
        end = float(done[gi].max()) if n else 0.0
        toks = tuple(int(x) for x in lens[gi])
        delivered.append((int(layout.plan_index[gi]), GroupResult(
            prompt_id=a.prompt_id, pool=a.pool, replica=a.replica, completion_s=end,
            response_tokens=toks, prompt_tokens=int(layout.prompt_tokens[gi * n]) if n else 0,
        )))
        generated += sum(toks)
        req_rep = layout.request_replica[gi * n:(gi + 1) * n]
        for r in a.all_replicas:
            busy[r] = max(busy[r], float(done[gi][req_rep == r].max()))
        spans.append(GroupSpan(a.prompt_id, a.replica, a.pool, end, True))
        if a.pool is Pool.TAIL:
            tail_time = max(tail_time, end)
        elif a.pinned:
            pinned_last = max(pinned_last, end)
    bulk_cut = max(cutoff_s, pinned_last)
    outcome = StepOutcome(
        step=plan.step,
        delivered=tuple(g for _, g in sorted(delivered, key=lambda x: x[0])),
        aborted=tuple(g for _, g in sorted(aborted, key=lambda x: x[0])),
        tail_time_s=tail_time,
        bulk_cut_s=bulk_cut,
        makespan_s=max(tail_time, bulk_cut),
        wasted_tokens=wasted,
        generated_tokens=generated,
        replica_busy_s=tuple(float(b) for b in busy),
    )
    work = work_at_cutoff(layout, done_s, tokens_so_far, aborted_mask, cutoff_s,
                          plan.num_replicas)
    return SimStepResult(outcome=outcome, spans=tuple(spans), cutoff_s=cutoff_s,
                         work_at_cutoff=work)
