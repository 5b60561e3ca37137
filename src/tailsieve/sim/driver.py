"""Multi-step simulation of any policy over a workload model, paired across policies.

Every policy reads the same ordered prompt stream, and a response's length is a function of
(prompt, the step its attempt runs at, seed) only: a candidate regenerated at step t+1 gets
the step-(t+1) draw (on-policy regeneration), and two policies that run the same prompt at the
same step see the same lengths.

Baselines (``uniform``, ``uniform-oracle``, ``streamrl-oracle``, ``seer-oracle``,
``topk-oracle``) route each step's N groups once. ``tailsieve`` and ``tailsieve-fixed`` run
the step protocol (``RolloutProtocol``) with their controller on the ``SimExecutor``, then a
final flush step that drains the carried candidates.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.controller import Controller
from tailsieve.core.diagnostics import PredictedPoolTimes, diagnose_step
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ConfigError
from tailsieve.sim.baseline_step import BASELINE_POLICIES, EXTRA_BASELINES, run_baseline_step
from tailsieve.sim.executor import MoveHook, SimExecutor, SimStepResult
from tailsieve.sim.movepath import PieceSettings
from tailsieve.sim.records import PolicyRun, StepRecord
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.workloads import trace_prompt_tokens

IntArray = npt.NDArray[np.int64]
PROTOCOL_POLICIES: tuple[str, ...] = ("tailsieve-fixed", "tailsieve")
ALL_POLICIES: tuple[str, ...] = BASELINE_POLICIES + PROTOCOL_POLICIES
# accepted by name but not part of the default comparison: (q, m) held at (q0, m0), and
# llm-d's group co-location by tokens
EXTRA_POLICIES: tuple[str, ...] = ("tailsieve-static", *EXTRA_BASELINES)
KNOWN_POLICIES: tuple[str, ...] = ALL_POLICIES + EXTRA_POLICIES


class LengthModel(Protocol):
    """What the driver needs from a workload: response lengths of one attempt."""

    def group_lengths(
        self, prompt_id: str, step: int, n: int, rng: np.random.Generator
    ) -> IntArray: ...


EPOCH_MARK = "#e"  # prompt ids of later epochs: "<id>#e<epoch>" (unique within a run)


def epoch_prompt_ids(dataset: tuple[str, ...], seed: int | None) -> Iterator[str]:
    """Endless ordered stream over ``dataset``: epoch after epoch, each shuffled by a generator
    seeded with ``(seed, epoch)`` (dataset order when ``seed`` is None). Ids of epoch k > 0 get
    the suffix ``#e<k>`` so a prompt is never launched twice under one id."""
    if not dataset:
        raise ConfigError("the workload has no prompts")
    epoch = 0
    while True:
        order = (range(len(dataset)) if seed is None
                 else np.random.default_rng([seed, epoch]).permutation(len(dataset)).tolist())
        suffix = f"{EPOCH_MARK}{epoch}" if epoch else ""
        for i in order:
            yield dataset[i] + suffix
        epoch += 1


def base_prompt_id(prompt_id: str) -> str:
    """The dataset id behind a stream id (strips the ``#e<k>`` epoch suffix)."""
    head, mark, tail = prompt_id.rpartition(EPOCH_MARK)
    return head if mark and tail.isdigit() else prompt_id


class PairedLengths:
    """``(prompt_id, step) -> n lengths``, drawn with a generator seeded by (seed, step,
    prompt), cached so every policy sees identical lengths."""

    def __init__(self, workload: LengthModel, group_size: int, seed: int) -> None:
        self.workload = workload
        self.group_size = group_size
        self.seed = seed
        self._cache: dict[tuple[str, int], IntArray] = {}

    def __call__(self, prompt_id: str, step: int) -> IntArray:
        key = (prompt_id, step)
        got = self._cache.get(key)
        if got is None:
            rng = np.random.default_rng([self.seed, step, zlib.crc32(prompt_id.encode())])
            got = np.asarray(
                self.workload.group_lengths(base_prompt_id(prompt_id), step, self.group_size,
                                            rng),
                dtype=np.int64,
            )
            self._cache[key] = got
        return got


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Shape of a simulated run."""

    num_replicas: int  # R
    num_groups: int  # N groups per step
    group_size: int  # n responses per group
    num_steps: int  # regular steps (warm-up included), a flush step follows for TailSieve
    seed: int = 0
    q0: int | None = None  # controller's initial tail groups (None: its default)
    m0: int | None = None  # controller's initial tail replicas (None: its default)
    keep_timeline_step: int | None = None  # step whose per-group spans are kept (None: last)
    spread: bool = True  # protocol policies deal single responses (False: whole groups)
    pieces: PieceSettings | None = None  # moves: continued responses in bounded pieces (live)
    drain_lpt: bool = True  # the controller's LPT moves in the drain (core.drain)
    drain_priority: bool = False  # engine priority by tokens generated (core.drain)

    def __post_init__(self) -> None:
        for name in ("num_replicas", "num_groups", "group_size", "num_steps"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    def controller_config(self) -> ControllerConfig:
        return ControllerConfig(
            num_groups=self.num_groups, num_replicas=self.num_replicas,
            group_size=self.group_size, q0=self.q0, m0=self.m0, spread=self.spread,
            drain_lpt=self.drain_lpt, drain_priority=self.drain_priority,
        )


ControllerFactory = Callable[[str, SimSettings, PoolConfigs], Controller]


def default_controller(name: str, settings: SimSettings, pools: PoolConfigs) -> Controller:
    return make_controller(name, settings.controller_config(), pools.tail.throughput,
                           pools.bulk.throughput)


def _record(
    plan_or_none: StepPlan | None, outcome: StepOutcome, drawn: tuple[str, ...], q: int, m: int,
    pools: PoolConfigs, num_replicas: int, decision_s: float,
    prediction: PredictedPoolTimes | None = None, tail_replicas: tuple[int, ...] = (),
    work_at_cutoff: tuple[tuple[float, float], ...] = (),
) -> StepRecord:
    diag = diagnose_step(outcome, plan_or_none, prediction, tail_replicas, num_replicas,
                         work_at_cutoff)
    lens = np.concatenate([np.asarray(g.response_tokens) for g in outcome.delivered]) \
        if outcome.delivered else np.zeros(0)
    return StepRecord(
        step=outcome.step, makespan_s=outcome.makespan_s, tail_time_s=outcome.tail_time_s,
        bulk_cut_s=outcome.bulk_cut_s, q=q, m=m, num_aborted=len(outcome.aborted),
        num_pinned=len(plan_or_none.pinned_ids) if plan_or_none else 0,
        wasted_tokens=outcome.wasted_tokens, generated_tokens=outcome.generated_tokens,
        lower_bound_s=pools.lower_bound_s(lens, num_replicas), decision_s=decision_s,
        is_warmup=plan_or_none.is_warmup if plan_or_none else False,
        is_flush=plan_or_none.is_flush if plan_or_none else False,
        drawn_ids=drawn, delivered_ids=outcome.delivered_ids,
        aborted_ids=tuple(a.prompt_id for a in outcome.aborted),
        delivered_sizes=tuple(len(g.response_tokens) for g in outcome.delivered),
        num_preemptions=outcome.num_preemptions, recomputed_tokens=outcome.recomputed_tokens,
        replica_preemptions=outcome.replica_preemptions,
        diagnostics=diag,
        fluid_bound_s=pools.fluid_bound_s(outcome.delivered, num_replicas),
    )


def run_baseline(
    name: str, settings: SimSettings, prompt_ids: Iterable[str], lengths: PairedLengths,
    pools: PoolConfigs, prompt_tokens: Callable[[str], int] | None = None,
) -> PolicyRun:
    """A one-shot baseline over ``num_steps`` steps of N fresh groups each."""
    stream = PromptStream(prompt_ids)
    run = PolicyRun(name)
    for step in range(settings.num_steps):
        ids = stream.draw(settings.num_groups)
        if not ids:
            break
        outcome, routing = run_baseline_step(step, ids, lengths, name, settings.num_replicas,
                                             pools, prompt_tokens)
        run.records.append(_record(None, outcome, tuple(ids), routing.q,
                                   len(routing.tail_replicas), pools, settings.num_replicas, 0.0,
                                   tail_replicas=routing.tail_replicas))
    return run


@dataclass(slots=True)
class ProtocolRun:
    """A protocol policy's records plus one step's per-group spans (for the timeline plot)."""

    run: PolicyRun
    timeline: SimStepResult | None
    protocol: RolloutProtocol | None  # None for baselines


def run_protocol(
    name: str, settings: SimSettings, prompt_ids: Iterable[str], lengths: PairedLengths,
    pools: PoolConfigs, controller_factory: ControllerFactory = default_controller,
    executor: SimExecutor | None = None,
    prompt_tokens: Callable[[str], int] | None = None,
) -> ProtocolRun:
    """TailSieve (or any controller) through the step protocol, then a flush step."""
    proto = RolloutProtocol(
        ProtocolConfig(settings.num_replicas, settings.num_groups, settings.group_size),
        controller_factory(name, settings, pools),
    )
    ex = executor or SimExecutor(pools, pieces=settings.pieces)
    stream = PromptStream(prompt_ids)
    run = PolicyRun(name)
    keep = settings.keep_timeline_step
    keep = settings.num_steps - 1 if keep is None else keep
    timeline: SimStepResult | None = None
    for step in range(settings.num_steps + 1):
        flush = step == settings.num_steps
        if flush and not proto.has_carried:
            break
        t0 = time.perf_counter()
        plan = proto.plan_step(stream, flush=flush)
        t1 = time.perf_counter()
        if not flush and plan.num_required < settings.num_groups:
            raise ConfigError(f"the workload ran out of prompts at step {step}")
        prediction = proto.controller.predict_pool_times(plan.q, plan.m)
        res = ex.run_detailed(plan, lengths, prompt_tokens)
        t2 = time.perf_counter()
        proto.update_from_outcome(plan, res.outcome)
        t3 = time.perf_counter()
        if step == keep:
            timeline = res
        run.records.append(_record(plan, res.outcome, plan.fresh_prompt_ids, plan.q, plan.m,
                                   pools, settings.num_replicas, (t1 - t0) + (t3 - t2),
                                   prediction, work_at_cutoff=res.work_at_cutoff))
    return ProtocolRun(run, timeline, proto)


def run_policies(
    policies: Iterable[str], settings: SimSettings, prompt_ids: Callable[[], Iterable[str]],
    workload: LengthModel, pools: PoolConfigs,
    controller_factory: ControllerFactory = default_controller,
    move_hook: MoveHook | None = None,
) -> dict[str, ProtocolRun]:
    """Run each policy on the same prompt stream and lengths (a shared ``PairedLengths``);
    ``move_hook`` goes to the protocol policies' executor (``SimExecutor``)."""
    lengths = PairedLengths(workload, settings.group_size, settings.seed)
    table = trace_prompt_tokens(workload)
    ptoks = None if table is None else (lambda pid: table.get(base_prompt_id(pid), 0))
    out: dict[str, ProtocolRun] = {}
    for name in policies:
        if name in BASELINE_POLICIES or name in EXTRA_BASELINES:
            run = run_baseline(name, settings, prompt_ids(), lengths, pools, ptoks)
            out[name] = ProtocolRun(run, None, None)
        elif name in PROTOCOL_POLICIES or name in EXTRA_POLICIES:
            ex = None if move_hook is None else SimExecutor(pools, pieces=settings.pieces,
                                                            move_hook=move_hook)
            out[name] = run_protocol(name, settings, prompt_ids(), lengths, pools,
                                     controller_factory, ex, prompt_tokens=ptoks)
        else:
            known = ", ".join(KNOWN_POLICIES)
            raise ConfigError(f"unknown policy {name!r}; choose from {known}")
    return out
