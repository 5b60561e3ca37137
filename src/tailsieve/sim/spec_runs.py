"""Speculation in the simulator: the honest baselines and TailSieve's placement, paired.

Every variant runs on the same prompts and lengths (``run_policies`` with one seed's
``PairedLengths``); each gets the pools its speculation implies. Every speculating variant
uses the same engine speculation with the same batch-size gate (``SpecEngine`` gate ``pays``:
speculate only at the batch sizes where it pays, vLLM's ``num_speculative_tokens_per_batch_size``
schedule), except the one column that shows what the gate is worth:

- ``uniform-requests``: round-robin requests with that speculation on every replica -- the
  honest baseline (what a user gets from vLLM with a batch-size schedule, without TailSieve);
- ``uniform-requests-nospec``: round-robin requests, no speculation;
- ``uniform-requests-ungated``: the baseline speculating at every batch (a
  ``--speculative-config`` without a schedule);
- ``uniform-spec``: whole groups round-robin with the same speculation (siblings together, no
  balance; a stricter baseline for a server-tree source);
- ``tailsieve``: the balancer (moves) with the same speculation, and the groups dealt spread or
  whole (``control.colocate``: only for a server-tree source, when its drafts are worth more
  than the balance they cost, decided from measured warm-up step times); dealt whole, the
  balancer prices each move by the sibling drafts it loses (``core.balance_drafts``);
- ``seer-oracle``: knows every length, same speculation as ``tailsieve``'s spread dealing.

Acceptance follows the draft source (``model.acceptance``). Only a server's suffix tree
(placement ``server``, vLLM ``suffix``) depends on where a response runs: ``k``, the group's
responses dealt to a replica (spread over ``R`` replicas ``k = max(1, n // R)``; dealt whole
``k = n``), helps once they have finished there (``SpecEngine.throughput(..., dealt=)``), and
the tokens decoded after a move away from the group's server draft at ``k = 1``: a first pass
measures that fraction ``f`` (``OffsiteMeter``, the executor's move hook) and the second prices
every replica at the harmonic mix ``1 / t = (1 - f) / t(k) + f / t(1)`` (per-replica acceptance:
the engine model advances all running requests together). Every other source (prompt lookup,
EAGLE/MTP, Seer's group drafter, the previous epoch) drafts alike wherever a response runs, so
the baseline gets the same acceptance as TailSieve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tailsieve.control.colocate import ColocationChoice, choose_colocation, k_spread
from tailsieve.control.factory import make_controller
from tailsieve.core.balance_drafts import DraftFactor, DraftPricing
from tailsieve.core.controller import Controller
from tailsieve.model.acceptance import AcceptanceCurve
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.spec_engine import SpecEngine
from tailsieve.sim.driver import (
    ControllerFactory,
    LengthModel,
    ProtocolRun,
    SimSettings,
    default_controller,
    run_policies,
)
from tailsieve.sim.layout import RequestLayout
from tailsieve.sim.movepath import Piece
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import STEADY_FROM

SPEC_VARIANTS: tuple[str, ...] = (
    "uniform-requests-nospec", "uniform-requests", "uniform-requests-ungated", "uniform-spec",
    "tailsieve", "seer-oracle",
)
BASELINE = "uniform-requests"


def spec_pools(base: ReplicaConfig, engine: SpecEngine | None, k: float,
               dealt: int | None = None) -> PoolConfigs:
    """Both pools of ``base`` with ``engine``'s speculation at ``k`` co-located siblings,
    drafting from the finished ones when ``dealt`` (requests per replica) is given (plain
    pools when ``engine`` is None)."""
    if engine is None:
        return PoolConfigs.single(base)
    model = engine.throughput(base.throughput, k, dealt=dealt)
    return PoolConfigs.single(replace(base, throughput=model))


def mixed_curve(curve: AcceptanceCurve, offsite: float) -> AcceptanceCurve:
    """``curve`` with a fraction ``offsite`` of the tokens drafted at ``k = 1`` (harmonic
    mix at every ``k``: seconds per token add up)."""
    pts = tuple((k, 1.0 / ((1.0 - offsite) / t + offsite / curve.tau(1)))
                for k, t in curve.tau_by_k)
    drafted = tuple((k, curve.drafted(k)) for k, _ in curve.tau_by_k)
    return AcceptanceCurve(f"{curve.name}-moved{offsite:.3f}", curve.source, pts, drafted,
                           curve.draft_cost, curve.max_spec_tokens, curve.citation,
                           curve.placement)


@dataclass(slots=True)
class OffsiteMeter:
    """The executor's move hook (``sim.executor.MoveHook``) for whole-group dealing: prices
    each move by the sibling drafts it loses (``pricing``; None: unpriced) and counts the
    fraction of decoded tokens that ran away from every server their group was dealt to."""

    pricing: DraftPricing | None = None
    offsite_tokens: int = 0
    total_tokens: int = 0
    per_step: list[float] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        return self.offsite_tokens / self.total_tokens if self.total_tokens else 0.0

    def draft_factor(self, layout: RequestLayout) -> DraftFactor | None:
        if self.pricing is None:
            return None
        return self.pricing.for_dealing(layout.request_replica.tolist(), layout.group_size)

    def observe(self, layout: RequestLayout, pieces: Sequence[Sequence[Piece]]) -> None:
        self.count(layout.request_replica, layout.group_size, pieces)

    def count(self, request_replica: np.ndarray, group_size: int,
              pieces: Sequence[Sequence[Piece]]) -> None:
        """Add one step: request ``i`` was dealt to ``request_replica[i]`` and ran ``pieces[i]``
        (``(replica, first, end)`` each)."""
        off = tot = 0
        for i, chain in enumerate(pieces):
            g = i // group_size
            home = set(request_replica[g * group_size:(g + 1) * group_size].tolist())
            for rep, first, end in chain:
                tot += end - first
                if rep not in home:
                    off += end - first
        self.offsite_tokens += off
        self.total_tokens += tot
        self.per_step.append(off / tot if tot else 0.0)


@dataclass(frozen=True, slots=True)
class SpecRun:
    """One seed's runs of every variant plus what TailSieve decided."""

    runs: dict[str, ProtocolRun]
    colocation: ColocationChoice
    offsite_fraction: float  # of the grouped variant's tokens (0 when not run)
    pools: dict[str, PoolConfigs] = field(default_factory=dict)  # what each variant ran on


def run_spec_variants(
    settings: SimSettings, prompt_ids: Callable[[], Iterable[str]], workload: LengthModel,
    base: ReplicaConfig, curve: AcceptanceCurve, price: float = 1.0,
    variants: Iterable[str] = SPEC_VARIANTS, colocate: str = "auto",
    price_drafts: bool = True,
) -> SpecRun:
    """Run ``variants`` on one seed; ``colocate``: ``auto`` (measured choice), ``spread``
    or ``group``; ``price_drafts``: with groups dealt whole, the balancer skips a move whose
    gain does not cover the sibling drafts it loses (``core.balance_drafts``)."""
    n, r = settings.group_size, settings.num_replicas
    ks = k_spread(n, r)
    dealt = max(1, settings.num_groups * n // r)  # requests per replica at a step's start
    gated = SpecEngine(curve, price, "pays")  # the one batch-size gate every variant shares
    wanted = list(variants)
    runs: dict[str, ProtocolRun] = {}
    used: dict[str, PoolConfigs] = {}

    def one(name: str, policy: str, pools: PoolConfigs, st: SimSettings = settings,
            factory: ControllerFactory = default_controller,
            hook: OffsiteMeter | None = None) -> ProtocolRun:
        used[name] = pools
        return run_policies([policy], st, prompt_ids, workload, pools, factory,
                            move_hook=hook)[policy]

    plain_rr = "uniform-requests"
    if "uniform-requests-nospec" in wanted:
        runs["uniform-requests-nospec"] = one("uniform-requests-nospec", plain_rr,
                                              spec_pools(base, None, 1))
    if BASELINE in wanted:
        runs[BASELINE] = one(BASELINE, plain_rr, spec_pools(base, gated, ks, dealt))
    if "uniform-requests-ungated" in wanted:
        runs["uniform-requests-ungated"] = one(
            "uniform-requests-ungated", plain_rr,
            spec_pools(base, SpecEngine(curve, price, "always"), ks, dealt))
    if "uniform-spec" in wanted:
        runs["uniform-spec"] = one("uniform-spec", "uniform", spec_pools(base, gated, n, dealt))
    if "seer-oracle" in wanted:
        runs["seer-oracle"] = one("seer-oracle", "seer-oracle",
                                  spec_pools(base, gated, ks, dealt))
    offsite = 0.0
    choice = ColocationChoice("spread", ks, "not asked")
    if "tailsieve" in wanted:
        spread_run = one("tailsieve-spread", "tailsieve", spec_pools(base, gated, ks, dealt))
        grouped_run = None
        if colocate == "group" or (colocate == "auto" and curve.server_siblings and n > ks):
            grouped = replace(settings, spread=False, m0=0)
            pricing = DraftPricing(curve) if price_drafts else None
            meter = OffsiteMeter(pricing)
            one("tailsieve-grouped", "tailsieve", spec_pools(base, gated, n, dealt), grouped,
                balance_only, meter)
            offsite = meter.fraction
            mixed = SpecEngine(mixed_curve(curve, offsite), price, "pays")
            grouped_run = one("tailsieve-grouped", "tailsieve",
                              spec_pools(base, mixed, n, dealt), grouped, balance_only,
                              OffsiteMeter(pricing))
        choice = choose_colocation(
            curve, n, r, _warmup_s(spread_run),
            None if grouped_run is None else _warmup_s(grouped_run), colocate)
        runs["tailsieve"] = grouped_run if choice.dealing == "group" and grouped_run \
            else spread_run
        used["tailsieve"] = used["tailsieve-grouped" if runs["tailsieve"] is grouped_run
                                 else "tailsieve-spread"]
        runs["tailsieve-spread"] = spread_run
        if grouped_run is not None:
            runs["tailsieve-grouped"] = grouped_run
    return SpecRun(runs, choice, offsite, used)


def balance_only(name: str, settings: SimSettings, pools: PoolConfigs) -> Controller:
    """The ``tailsieve`` controller held in balance mode (``q = m = 0``, moves on, outer loop
    off): with groups dealt whole, a tail pool would take whole groups away from the servers
    where their siblings finished."""
    cfg = replace(settings.controller_config(), outer_enabled=False, m0=0)
    return make_controller(name, cfg, pools.tail.throughput, pools.bulk.throughput)


def _warmup_s(run: ProtocolRun) -> float:
    """Mean measured step time before the steady steps (what a controller has seen when it
    commits to a dealing)."""
    early = [r.makespan_s for r in run.run.regular if r.step < STEADY_FROM]
    return float(np.mean(early)) if early else float("inf")
