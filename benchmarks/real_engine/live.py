"""Live steps of several policies through ``TailSieveRollout``, interleaved step by step."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from real_engine.servers import loadavg, log
from tailsieve.core.balance_trace import BalanceTrace
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_batch import RolloutBatch
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import StepResult


@dataclass(slots=True)
class LiveStep:
    """One live step: its plan, outcome, wall time and the machine's load then."""

    plan: StepPlan
    outcome: StepOutcome
    wall_s: float
    loadavg: str
    seq: int  # position of this step among all policies' steps, in the order they ran
    round: int = 0  # interleaving round (step t of every lane is round t; a flush: --steps)
    num_moves: int = 0  # moves the live rebalancer asked for in this step (accepted)
    moved_tokens: int = 0  # prefix tokens those continuations carried
    num_effective: int = 0  # of the moves, those that took effect (a piece began elsewhere)
    trace: BalanceTrace | None = None  # every balance check of the step (core.balance_trace)


@dataclass(frozen=True, slots=True)
class LaneSpec:
    """One lane of the benchmark: a live policy, optionally with moves by continuation."""

    name: str  # the lane's name in every table ("tailsieve+moves" for moves)
    policy: str  # the live policy (controller) name
    moves: bool = False  # continuation pieces + the live rebalancer (the controller balances)

    @classmethod
    def parse(cls, name: str) -> LaneSpec:
        base, plus, extra = name.partition("+")
        if plus and extra != "moves":
            raise ValueError(f"lane {name!r}: only '+moves' may follow a policy")
        return cls(name, base, bool(plus))


class Recorder:
    """Wraps ``executor.run`` to keep every step's plan, result and moves. Passes every argument
    through (the rollout calls ``run(plan, prompts, active)``)."""

    def __init__(self, executor: LiveExecutor) -> None:
        self.captured: list[tuple[StepPlan, StepResult, tuple[int, int, int], BalanceTrace]] = []
        self._executor = executor
        self._inner = executor.run
        executor.run = self.run  # type: ignore[method-assign]

    async def run(self, plan: StepPlan, *args: Any, **kwargs: Any) -> StepResult:
        res = await self._inner(plan, *args, **kwargs)
        tally = self._executor.last_moves
        self.captured.append((plan, res, (tally.num_moves, tally.moved_tokens,
                                          tally.num_effective), self._executor.last_trace))
        return res


@dataclass(slots=True)
class Lane:
    """One policy's rollout and what it delivered."""

    policy: str  # the lane's name (LaneSpec.name)
    ro: TailSieveRollout
    recorder: Recorder
    prompts: Iterator[PromptInput]
    steps: list[LiveStep] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)


def check_batch(lane: Lane, batch: RolloutBatch, lengths: ReplayLengths | None,
                groups: int | None, group_size: int) -> None:
    """N groups (``groups``; None in a flush) of n responses, each exactly its forced length
    (``finish_reason == "length"``; natural lengths, ``lengths`` None: n responses each
    ending in "stop" or "length"), no prompt delivered twice."""
    if groups is not None:
        assert len(batch.groups) == groups, (lane.policy, batch.step, len(batch.groups))
    if lengths is None:
        for g in batch.groups:
            assert len(g.responses) == group_size, g.prompt_id
            assert all(r.finish_reason in ("stop", "length") for r in g.responses), g.prompt_id
        lane.delivered += [g.prompt_id for g in batch.groups]
        assert len(lane.delivered) == len(set(lane.delivered)), f"{lane.policy}: delivered twice"
        return
    for g in batch.groups:
        toks = [r.num_tokens for r in g.responses]
        want = [lengths(g.prompt_id, j) for j in range(group_size)]
        assert toks == want, f"{lane.policy} step {batch.step} {g.prompt_id}: {toks} != {want}"
        assert all(r.finish_reason == "length" for r in g.responses), g.prompt_id
    lane.delivered += [g.prompt_id for g in batch.groups]
    assert len(lane.delivered) == len(set(lane.delivered)), f"{lane.policy}: delivered twice"


def record(lane: Lane, batch: RolloutBatch, seq: int, rnd: int) -> None:
    """Keep the step as it ran: a lane without continuation cannot move, so its plan's balance
    settings (the ``tailsieve`` controller always supplies them) are dropped: the simulator
    then replays it without moves, as it ran."""
    plan, res, (moves, moved, effective), trace = lane.recorder.captured[-1]
    if not lane.ro.config.continuation:
        plan = dataclasses.replace(plan, balance=None)
    assert plan.step == batch.step, (lane.policy, plan.step, batch.step)
    lane.steps.append(LiveStep(plan, res.outcome, batch.metrics.wall_s, loadavg(), seq, rnd,
                               moves, moved, effective, trace))
    log(f"{lane.policy} step {plan.step}{' (flush)' if plan.is_flush else ''}: makespan "
        f"{res.outcome.makespan_s:.3f} s q={plan.q} m={plan.m} aborted={len(res.outcome.aborted)}"
        f" moves={moves} (took effect {effective})")


@dataclass(frozen=True, slots=True)
class MoveSettings:
    """How a ``+moves`` lane continues responses: piece length and the seam it prices."""

    piece_tokens: int  # max tokens per piece (the points where a response's place is known)
    seam_s: float  # the controller's price of one move beyond its prefill, seconds


def lane_controller(spec: LaneSpec, controller: dict[str, Any],
                    moves: MoveSettings) -> dict[str, Any]:
    """The lane's controller overrides: a moves lane prices a move at ``moves.seam_s`` and
    balances every step (no balance gate: the lane measures moves against the simulator)."""
    return controller | {"seam_s": moves.seam_s, "gate": None} if spec.moves else dict(controller)


def lane_config(spec: LaneSpec, model: str, lengths: ReplayLengths | None, groups: int,
                group_size: int, profile_path: str, controller: dict[str, Any],
                moves: MoveSettings, max_tokens: int = 1024) -> RolloutConfig:
    """``lengths`` None: natural lengths (chat prompts, EOS, at most ``max_tokens``)."""
    ctrl = lane_controller(spec, controller, moves)
    natural = lengths is None
    return RolloutConfig(num_groups=groups, group_size=group_size, policy=spec.policy,
                         model=model,
                         backend=Backend.VLLM_CHAT if natural else Backend.VLLM,
                         # a chained response restarts a seeded generator at each seam
                         sampling=SamplingParams(max_tokens=max_tokens, temperature=1.0,
                                                 seed=None if spec.moves or natural else 0),
                         replay=lengths, request_timeout_s=1800.0, profile=profile_path,
                         controller=ctrl, moves=spec.moves,
                         piece_tokens=moves.piece_tokens if spec.moves else None)


async def run_interleaved(specs: list[LaneSpec], endpoints: list[str], model: str,
                          lengths: ReplayLengths | None, prompts: list[PromptInput], groups: int,
                          group_size: int, steps: int, profile_path: str,
                          controller: dict[str, Any] | None = None,
                          moves: MoveSettings | None = None,
                          between: Callable[[int], Awaitable[None]] | None = None,
                          max_tokens: int = 1024,
                          ) -> dict[str, list[LiveStep]]:
    """``steps`` steps of every lane, interleaved (round t: step t of each lane; the order
    rotates by one lane every round, so none always runs first), then a flush of each lane that
    carries prompts (round ``steps``). ``between(t)`` runs after every round but the last (a
    profile of the machine between rounds). Every lane reads the prompts in the same order and
    uses the same controller profile and ``controller`` overrides (``q0``, ``m0``). Every batch
    is checked (``check_batch``)."""
    mv = moves or MoveSettings(piece_tokens=128, seam_s=0.05)
    cfgs = {s.name: lane_config(s, model, lengths, groups, group_size, profile_path,
                                controller or {}, mv, max_tokens) for s in specs}
    async with AsyncExitStack() as stack:
        lanes: list[Lane] = []
        seq = itertools.count()
        for s in specs:
            ro = await stack.enter_async_context(TailSieveRollout(endpoints, cfgs[s.name]))
            lanes.append(Lane(s.name, ro, Recorder(ro.executor), iter(prompts)))
        for t in range(steps):
            k = t % len(lanes)
            for lane in lanes[k:] + lanes[:k]:
                need = lane.ro.num_fresh_needed()
                batch = await lane.ro.step([next(lane.prompts) for _ in range(need)])
                check_batch(lane, batch, lengths, groups, group_size)
                record(lane, batch, next(seq), t)
            if between is not None and t < steps - 1:
                await between(t)
        for lane in lanes:
            last = await lane.ro.flush()
            if last is not None:
                check_batch(lane, last, lengths, None, group_size)
                record(lane, last, next(seq), steps)
    return {lane.policy: lane.steps for lane in lanes}


def plan_dict(plan: StepPlan) -> dict[str, Any]:
    return {
        "step": plan.step, "q": plan.q, "m": plan.m, "num_extra": plan.num_extra,
        "num_fresh_to_deliver": plan.num_fresh_to_deliver, "is_flush": plan.is_flush,
        "tail_replicas": list(plan.tail_replicas), "bulk_replicas": list(plan.bulk_replicas),
        "balance": plan.balance is not None,
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


@dataclass(frozen=True, slots=True)
class ProducedLengths:
    """Natural lengths as a live lane produced them, for the simulator's replay: per prompt,
    each response's tokens when the lane delivered the group; ``default`` for a prompt it
    never delivered (launched and cut, never finished: its length is not known)."""

    lengths: dict[str, tuple[int, ...]]
    default: int

    @classmethod
    def of(cls, steps: list[LiveStep], default: int) -> ProducedLengths:
        out: dict[str, tuple[int, ...]] = {}
        for s in steps:
            for g in s.outcome.delivered:
                out[g.prompt_id] = tuple(g.response_tokens)
        return cls(out, default)

    def __call__(self, prompt_id: str, sample: int) -> int:
        row = self.lengths.get(prompt_id)
        return row[sample % len(row)] if row else self.default
