"""Speculation in the simulator: the honest baselines and TailSieve's placement, paired.

Every variant runs on the same prompts and lengths (``run_policies`` with one seed's
``PairedLengths``); each gets the pools its speculation implies:

- ``uniform-requests-nospec``: round-robin requests, no speculation;
- ``uniform-requests``: round-robin requests with the same engine speculation on every
  replica, at every batch (what switching on vLLM's ``suffix`` or MTP gives without
  TailSieve) -- the honest baseline;
- ``uniform-requests-gated``: the same with speculation only where it pays (TLT's rule
  without placement; a stricter baseline);
- ``uniform-spec``: whole groups round-robin with speculation at every batch (siblings
  together, no balance; another stricter baseline for sibling sources);
- ``tailsieve``: the balancer (moves) with speculation where it pays, and the groups dealt
  spread or whole (``control.colocate``: siblings share a server when their drafts are worth
  more than the balance they cost, decided from measured warm-up step times); dealt whole,
  the balancer prices each move by the sibling drafts it loses (``core.balance_drafts``);
- ``seer-oracle``: knows every length, same speculation as ``tailsieve``'s spread dealing.

A replica's acceptance depends on ``k``, the number of a group's responses on its server:
spread over ``R`` replicas ``k = max(1, n // R)``; dealt whole ``k = n``. Siblings draft for
each other once they have finished (``SpecEngine.throughput(..., dealt=)``: at ``b`` of the
replica's ``dealt`` requests still running, ``1 + (k - 1)(1 - b / dealt)`` of the group are
there to draft from), and the tokens decoded after a move away from the group's server draft
at ``k = 1``: a first pass measures that fraction ``f`` (``OffsiteMeter``) and the second
prices every replica at the harmonic mix ``1 / t = (1 - f) / t(k) + f / t(1)`` (per-replica
acceptance: the engine model advances all running requests together).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tailsieve.control.base import Controller
from tailsieve.control.colocate import ColocationChoice, choose_colocation, k_spread
from tailsieve.control.factory import make_controller
from tailsieve.core.balance_drafts import DraftPricing
from tailsieve.model.acceptance import AcceptanceCurve
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.spec_engine import Gate, SpecEngine
from tailsieve.sim import executor as sim_executor
from tailsieve.sim.driver import (
    ControllerFactory,
    LengthModel,
    ProtocolRun,
    SimSettings,
    default_controller,
    run_policies,
)
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.speedup_stats import STEADY_FROM

SPEC_VARIANTS: tuple[str, ...] = (
    "uniform-requests-nospec", "uniform-requests", "uniform-requests-gated", "uniform-spec",
    "tailsieve", "seer-oracle",
)


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
                           curve.draft_cost, curve.max_spec_tokens, curve.citation)


@dataclass(slots=True)
class OffsiteMeter:
    """Fraction of decoded tokens that ran away from every server their group was dealt to
    (after a move), over the steps simulated while it is installed."""

    offsite_tokens: int = 0
    total_tokens: int = 0
    per_step: list[float] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        return self.offsite_tokens / self.total_tokens if self.total_tokens else 0.0

    def observe(self, request_replica: np.ndarray, group_size: int,
                pieces: list[list[tuple[int, int, int]]]) -> None:
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


@contextmanager
def metering_moves(meter: OffsiteMeter,
                   pricing: DraftPricing | None = None) -> Iterator[OffsiteMeter]:
    """Install ``meter`` on the simulator's move path (every step keeps its pieces); with
    ``pricing`` the balancer's moves are priced by the sibling drafts they lose."""
    inner = sim_executor.simulate_with_moves

    def wrapped(layout: Any, configs: Any, k: int, balance: Any, keep_pieces: bool = False,
                tail_replicas: Any = (), pieces: Any = None, trace: Any = None,
                draft_factor: Any = None) -> Any:
        rho = draft_factor if pricing is None else pricing.for_dealing(
            layout.request_replica.tolist(), layout.group_size)
        res, stats = inner(layout, configs, k, balance, True, tail_replicas, pieces,
                           trace=trace, draft_factor=rho)
        meter.observe(layout.request_replica, layout.group_size, stats.pieces)
        if not keep_pieces:
            stats.pieces = []
        return res, stats

    sim_executor.simulate_with_moves = wrapped
    try:
        yield meter
    finally:
        sim_executor.simulate_with_moves = inner


@dataclass(frozen=True, slots=True)
class SpecRun:
    """One seed's runs of every variant plus what TailSieve decided."""

    runs: dict[str, ProtocolRun]
    colocation: ColocationChoice
    offsite_fraction: float  # of the grouped variant's tokens (0 when not run)


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
    always = SpecEngine(curve, price, "always")
    gated: Gate = "pays"
    placed = SpecEngine(curve, price, gated)
    wanted = list(variants)
    runs: dict[str, ProtocolRun] = {}

    def one(policy: str, pools: PoolConfigs, st: SimSettings = settings,
            factory: ControllerFactory = default_controller) -> ProtocolRun:
        return run_policies([policy], st, prompt_ids, workload, pools, factory)[policy]

    if "uniform-requests-nospec" in wanted:
        runs["uniform-requests-nospec"] = one("uniform-requests", spec_pools(base, None, 1))
    if "uniform-requests" in wanted:
        runs["uniform-requests"] = one("uniform-requests", spec_pools(base, always, ks, dealt))
    if "uniform-requests-gated" in wanted:
        runs["uniform-requests-gated"] = one("uniform-requests", spec_pools(base, placed, ks, dealt))
    if "uniform-spec" in wanted:
        runs["uniform-spec"] = one("uniform", spec_pools(base, always, n, dealt))
    if "seer-oracle" in wanted:
        runs["seer-oracle"] = one("seer-oracle", spec_pools(base, placed, ks, dealt))
    offsite = 0.0
    choice = ColocationChoice("spread", ks, "not asked")
    if "tailsieve" in wanted:
        spread_run = one("tailsieve", spec_pools(base, placed, ks, dealt))
        grouped_run = None
        if colocate == "group" or (colocate == "auto" and curve.sibling and n > ks):
            grouped = replace(settings, spread=False, m0=0)
            pricing = DraftPricing(curve) if price_drafts else None
            with metering_moves(OffsiteMeter(), pricing) as meter:
                first = one("tailsieve", spec_pools(base, placed, n, dealt), grouped,
                            balance_only)
            offsite = meter.fraction
            mixed = SpecEngine(mixed_curve(curve, offsite), price, gated)
            with metering_moves(OffsiteMeter(), pricing):
                grouped_run = one("tailsieve", spec_pools(base, mixed, n, dealt), grouped,
                                  balance_only)
            del first
        choice = choose_colocation(
            curve, n, r, _warmup_s(spread_run),
            None if grouped_run is None else _warmup_s(grouped_run), colocate)
        runs["tailsieve"] = grouped_run if choice.dealing == "group" and grouped_run \
            else spread_run
        runs["tailsieve-spread"] = spread_run
        if grouped_run is not None:
            runs["tailsieve-grouped"] = grouped_run
    return SpecRun(runs, choice, offsite)


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
