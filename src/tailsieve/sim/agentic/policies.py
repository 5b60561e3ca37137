"""The policies the agentic simulator compares: a session router plus what runs with it.

Count routers (verl's default, prime-rl's, SGLang's cache_aware, verl #7435 and #6533,
per-turn round-robin) only place turns; verl #6556's ``rebalance_requests`` also aborts every
running turn and resumes each on the least loaded replica once a replica runs dry
(``session.rebalance``); llm-d's burst mode co-locates each group on one replica, the groups
balanced by tokens (``session.colocate``). TailSieve places turns with ``place_turn``, moves
running turns by continuation between them (it holds the generation) and runs both behind
the balance gate; it admits sessions by KV room (``session.admission.KvAdmission``: a new session
waits at the router while no replica's resident sessions leave room for it, which does
nothing where the contexts fit). The length-informed policy places turns by the same decision
told every remaining length and moves running turns as TailSieve does: it measures what knowing
lengths adds, and is not a bound (``sim.agentic.bound`` is).
"""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.errors import ConfigError
from tailsieve.session.router_base import SessionPolicy

__all__ = ["BASELINE", "DEFAULT_POLICIES", "POLICIES", "PolicySpec", "policy_spec"]


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One simulated policy."""

    name: str  # what results call it
    router: SessionPolicy  # who places turns
    midturn: bool = False  # moves running turns by continuation
    gate: bool = False  # the balance gate switches its moves on and off per step
    boundary_moves: bool = True  # (TailSieve) turns may leave their home at a boundary
    kw: tuple[tuple[str, object], ...] = ()  # router options (make_router keywords)
    remaining: bool = False  # (TailSieve) prices moves over the estimated remaining output
    priority: str = "off"  # engine priority: "off", "remaining" (estimated), "oracle"
    kv_share: float | None = None  # admit sessions by KV room (``session.admission.KvAdmission``):
    # the share of a replica's KV budget its resident sessions may reserve; None: off
    group_price: bool = True  # (TailSieve) a first turn pays the tail its group's siblings
    # stack on a replica (``session.group_price``); False: only the prefill saved is priced


POLICIES: dict[str, PolicySpec] = {p.name: p for p in (
    PolicySpec("verl-sticky", SessionPolicy.VERL),
    PolicySpec("sticky-least-loaded", SessionPolicy.STICKY_LEAST_LOADED),
    PolicySpec("cache-aware", SessionPolicy.CACHE_AWARE),
    PolicySpec("affinity-margin", SessionPolicy.MARGIN),
    PolicySpec("verl-repin", SessionPolicy.REPIN),
    PolicySpec("turn-round-robin", SessionPolicy.ROUND_ROBIN),
    PolicySpec("verl-rebalance", SessionPolicy.REBALANCE),
    PolicySpec("group-colocate", SessionPolicy.COLOCATE),
    PolicySpec("tailsieve", SessionPolicy.TAILSIEVE, midturn=True, gate=True, kv_share=1.0),
    PolicySpec("tailsieve-boundary", SessionPolicy.TAILSIEVE, gate=True, kv_share=1.0),
    PolicySpec("tailsieve-midturn", SessionPolicy.TAILSIEVE, midturn=True, gate=True,
               boundary_moves=False, kv_share=1.0),
    PolicySpec("length-informed", SessionPolicy.LENGTH_INFORMED, midturn=True, kv_share=1.0),
    # the levers of issue 39 (evidence the count rules cannot use), alone and together:
    # TailSieve before them (every turn sent at once), each lever alone on it, all together
    PolicySpec("tailsieve-nokv", SessionPolicy.TAILSIEVE, midturn=True, gate=True),
    PolicySpec("tailsieve-remaining", SessionPolicy.TAILSIEVE, midturn=True, gate=True,
               remaining=True),
    PolicySpec("tailsieve-priority", SessionPolicy.TAILSIEVE, midturn=True, gate=True,
               priority="remaining"),
    PolicySpec("tailsieve-levers", SessionPolicy.TAILSIEVE, midturn=True, gate=True,
               remaining=True, priority="remaining", kv_share=1.0),
    PolicySpec("tailsieve-nogroup", SessionPolicy.TAILSIEVE, midturn=True, gate=True,
               kv_share=1.0, group_price=False),
    PolicySpec("tailsieve-nokv-nogroup", SessionPolicy.TAILSIEVE, midturn=True, gate=True,
               group_price=False),
    PolicySpec("affinity-margin-priority", SessionPolicy.MARGIN, priority="remaining"),
    PolicySpec("length-informed-nokv", SessionPolicy.LENGTH_INFORMED, midturn=True),
    PolicySpec("length-informed-priority", SessionPolicy.LENGTH_INFORMED, midturn=True,
               priority="oracle"),
)}
BASELINE = "verl-sticky"
DEFAULT_POLICIES: tuple[str, ...] = (
    "verl-sticky", "sticky-least-loaded", "cache-aware", "affinity-margin", "verl-repin",
    "turn-round-robin", "verl-rebalance", "group-colocate", "tailsieve", "length-informed")


def policy_spec(name: str) -> PolicySpec:
    """The policy called ``name`` (one of ``POLICIES``)."""
    if name not in POLICIES:
        raise ConfigError(f"unknown agentic policy {name!r}; choose from {', '.join(POLICIES)}")
    return POLICIES[name]
