"""What a gateway is built from: the session router, the session book and the cost models.

``build_parts(config, num_replicas)`` makes them from ``session`` (the pure core every live
consumer shares) and the configured profile. ``Placement`` is where a turn goes, as the
gateway records it: the router's ``TurnDecision``, or the gateway's own choice when it keeps a
turn home (``moves=False``) or must avoid a replica out of service.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.decision import TurnDecision
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import least_loaded
from tailsieve.session.routers import SessionPolicy, SessionRouter, make_router
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a turn goes."""

    replica: int
    moved: bool  # away from the replica of the session's previous turn
    prefill_tokens: int  # context tokens expected to be prefilled there
    reason: str  # "first" | "stay" | "move" | "home-down" | "fallback" | a router's own

    @classmethod
    def of(cls, decision: TurnDecision) -> Placement:
        """From a router's decision."""
        return cls(decision.replica, decision.moved, decision.prefill_tokens, decision.reason)


@dataclass(frozen=True, slots=True)
class GatewayParts:
    """A gateway's router, book and per-replica cost models."""

    router: SessionRouter
    book: SessionBook
    configs: tuple[ReplicaConfig, ...]
    settings: SessionSettings = field(default_factory=SessionSettings)  # TailSieve's (as
    # built; each step's are these with the gate's ``moves`` and the step-time estimate)

    def least_loaded(self, views: Sequence[ReplicaView], healthy: Sequence[bool]) -> int:
        """The healthy replica whose decode iteration would cost least with one more turn
        (lowest index on ties)."""
        alive = [v for v in views if healthy[v.replica]]
        if not alive:
            raise ConfigError("no healthy replica in the book's views")
        return least_loaded(alive, lambda v: v.config.throughput.step_s(v.num_in_flight + 1,
                                                                        v.context_tokens),
                            lambda tied: min(tied, key=lambda v: v.replica)).replica

    def fallback(self, turn: TurnRequest, views: Sequence[ReplicaView],
                 healthy: Sequence[bool], reason: str) -> Placement:
        """The least loaded healthy replica (the router chose one out of service)."""
        r = self.least_loaded(views, healthy)
        return Placement(r, turn.home is not None and r != turn.home, turn.uncached_on(r),
                         reason)


def replica_configs(config: GatewayConfig, num_replicas: int) -> tuple[ReplicaConfig, ...]:
    """One cost model per replica from ``config.profile`` (``"auto"``: the fallback profile
    until a fitted one is given). Prefill, first or again, costs the profile's prefill model:
    a turn placed away from its cache prefills its whole context."""
    tp = load_profile(config.unfitted_profile)
    rc = ReplicaConfig.from_profile(tp, prefill_s_per_token="profile")
    return (rc,) * num_replicas


def build_parts(config: GatewayConfig, num_replicas: int,
                rng: np.random.Generator | None = None) -> GatewayParts:
    """The router of ``config.policy`` over a fresh book of ``num_replicas`` replicas.
    TailSieve's router reads the book's mean turn output as its expected turn length, and
    keeps sessions home with ``moves=False``."""
    configs = replica_configs(config, num_replicas)
    book = SessionBook(configs, PrefixCacheModel([c.kv_capacity_tokens for c in configs]))
    book.tool_wait_weight = (config.settings or SessionSettings()).tool_wait_weight
    kw: dict[str, Any] = dict(config.router_kw)
    settings = config.settings
    if config.policy is SessionPolicy.TAILSIEVE:
        kw.setdefault("expected_turn_tokens", lambda: book.expected_turn_tokens or None)
        if not config.moves:
            settings = replace(settings or SessionSettings(), moves=False)
    router = make_router(config.policy, settings,
                         rng=rng if rng is not None else np.random.default_rng(0), **kw)
    return GatewayParts(router, book, configs, settings or SessionSettings())
