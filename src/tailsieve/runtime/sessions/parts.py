"""What a gateway is built from: the session router, the session book and the cost models.

``build_parts(config, num_replicas)`` makes them from ``session`` (the pure core every live
consumer shares) and the configured profile. ``Placement`` is where a turn goes, as the
gateway records it: the router's ``TurnDecision``, or the gateway's own choice when it keeps a
turn home (``moves=False``) or must avoid a replica out of service.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tailsieve.core.balancer import ReplicaLoad
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.sessions.config import GatewayConfig


class TurnLike(Protocol):
    """What the gateway reads of a ``session.turn.TurnRequest``."""

    session_id: Hashable
    context_tokens: int
    home: int | None
    cached_tokens: Mapping[int, int]


class ViewLike(Protocol):
    """What the gateway reads of a ``session.replica_view.ReplicaView``."""

    replica: int
    config: ReplicaConfig
    num_running: int
    num_waiting: int
    num_tool_waits: int
    context_tokens: float


class Router(Protocol):
    """``session.routers.SessionRouter``."""

    def choose(self, turn: Any, views: Sequence[Any], elapsed_s: float) -> Any: ...

    def forget(self, session_id: Hashable) -> None: ...


class Book(Protocol):
    """``session.book.SessionBook`` (the events the gateway reports and what it reads)."""

    def request(self, session_id: Hashable, group_id: Hashable | None, context_tokens: int,
                prompt_tokens: int | None = None, max_tokens: int | None = None) -> Any: ...

    def start_turn(self, session_id: Hashable, replica: int, now_s: float) -> None: ...

    def progress(self, session_id: Hashable, generated_tokens: int, now_s: float) -> None: ...

    def move_turn(self, session_id: Hashable, dst: int, now_s: float) -> None: ...

    def end_turn(self, session_id: Hashable, output_tokens: int, now_s: float) -> None: ...

    def end_session(self, session_id: Hashable) -> None: ...

    def set_healthy(self, replica: int, healthy: bool) -> None: ...

    def views(self, now_s: float) -> list[Any]: ...

    def balance_loads(self, now_s: float) -> list[ReplicaLoad]: ...

    def cached(self, key: Hashable, replica: int) -> int: ...

    def cached_on(self, key: Hashable) -> Mapping[int, int]: ...


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a turn goes."""

    replica: int
    moved: bool  # away from the replica of the session's previous turn
    prefill_tokens: int  # context tokens expected to be prefilled there
    reason: str  # "first" | "stay" | "move" | "home-down" | "fallback" | a router's own

    @classmethod
    def of(cls, decision: Any) -> Placement:
        """From a router's ``TurnDecision``."""
        return cls(int(decision.replica), bool(decision.moved), int(decision.prefill_tokens),
                   str(decision.reason))


@dataclass(frozen=True, slots=True)
class GatewayParts:
    """A gateway's router, book and per-replica cost models."""

    router: Router
    book: Book
    configs: tuple[ReplicaConfig, ...]

    def stay(self, turn: TurnLike) -> Placement:
        """Keep the turn on its session's previous replica."""
        assert turn.home is not None
        return Placement(turn.home, False, _prefill(turn, turn.home), "stay")

    def least_loaded(self, views: Sequence[ViewLike], healthy: Sequence[bool]) -> int:
        """The healthy replica whose decode iteration would cost least with one more turn
        (lowest index on ties)."""
        best: tuple[float, int] | None = None
        for v in views:
            if not healthy[v.replica]:
                continue
            tp = v.config.throughput
            n = v.num_running + v.num_waiting
            cost = tp.tau(n + 1) + tp.context_s_per_token * v.context_tokens
            if best is None or (cost, v.replica) < best:
                best = (cost, v.replica)
        if best is None:
            raise ConfigError("no healthy replica in the book's views")
        return best[1]

    def fallback(self, turn: TurnLike, views: Sequence[ViewLike], healthy: Sequence[bool],
                 reason: str) -> Placement:
        """The least loaded healthy replica (the router chose one out of service)."""
        r = self.least_loaded(views, healthy)
        return Placement(r, turn.home is not None and r != turn.home, _prefill(turn, r), reason)


def _prefill(turn: TurnLike, replica: int) -> int:
    return max(0, int(turn.context_tokens) - int(turn.cached_tokens.get(replica, 0)))


def replica_configs(config: GatewayConfig, num_replicas: int) -> tuple[ReplicaConfig, ...]:
    """One cost model per replica from ``config.profile`` (``"auto"``: the fallback profile
    until a fitted one is given). Prefill, first or again, costs the profile's prefill model:
    a turn placed away from its cache prefills its whole context."""
    name = config.fallback_profile if config.profile == "auto" else config.profile
    tp = load_profile(name)
    rc = ReplicaConfig.from_profile(tp, prefill_s_per_token="profile")
    return (rc,) * num_replicas


def build_parts(config: GatewayConfig, num_replicas: int,
                rng: np.random.Generator | None = None) -> GatewayParts:
    """The router of ``config.policy`` and a fresh book over ``num_replicas`` replicas."""
    from tailsieve.session.book import SessionBook
    from tailsieve.session.cache_model import PrefixCacheModel
    from tailsieve.session.routers import make_router

    configs = replica_configs(config, num_replicas)
    cache = PrefixCacheModel([c.kv_capacity_tokens for c in configs])
    book = SessionBook(configs, cache)
    router = make_router(config.policy, config.settings,
                         rng=rng if rng is not None else np.random.default_rng(0),
                         **config.router_kw)
    return GatewayParts(router, book, configs)
