"""What every session router shares: the policy names, the interface, small helpers."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from enum import StrEnum
from typing import Protocol

import numpy as np

from tailsieve.errors import ReplicaError
from tailsieve.session.decision import TurnDecision
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.turn import TurnRequest

__all__ = ["SessionPolicy", "SessionRouter", "decide", "healthy_views", "least_loaded",
           "rendezvous"]


class SessionPolicy(StrEnum):
    """The session routers of issue 33 item 3, and TailSieve's."""

    VERL = "verl-sticky"  # verl default: sticky by trajectory, first turn to fewest in flight
    STICKY_LEAST_LOADED = "sticky-least-loaded"  # prime-rl (vllm-router): fewest sessions
    CACHE_AWARE = "cache-aware"  # SGLang router cache_aware (model gateway defaults)
    MARGIN = "affinity-margin"  # verl #7435: break affinity past a fixed margin (2)
    REPIN = "verl-repin"  # verl #6533: re-pin to the least loaded while the pool is skewed
    ROUND_ROBIN = "turn-round-robin"  # per-turn round-robin, ignores the cache
    REBALANCE = "verl-rebalance"  # verl #6556: abort all, clear stickiness, least loaded
    COLOCATE = "group-colocate"  # llm-d burst mode: each group on one replica, by tokens
    LENGTH_INFORMED = "length-informed"  # place_turn told the true lengths (simulator only)
    ORACLE = "length-informed"  # its former name (an alias): a placement, not a bound
    TAILSIEVE = "tailsieve"  # place_turn


class SessionRouter(Protocol):
    """Chooses the replica of each turn; one object per rollout (it may keep sticky state)."""

    policy: SessionPolicy

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        """The replica ``turn`` runs on (``views``: every replica, at the turn's arrival)."""
        ...

    def forget(self, session_id: Hashable) -> None:
        """The session ended (drop its sticky state)."""
        ...


def healthy_views(turn: TurnRequest, views: Sequence[ReplicaView]) -> list[ReplicaView]:
    """The healthy views (a clear error when there is none)."""
    out = [v for v in views if v.healthy]
    if not out:
        raise ReplicaError(f"no healthy replica for turn {turn.turn_index} of session "
                           f"{turn.session_id!r}")
    return out


def least_loaded(views: Sequence[ReplicaView], load: Callable[[ReplicaView], float],
                 tie: Callable[[Sequence[ReplicaView]], ReplicaView]) -> ReplicaView:
    """The view of least ``load``; ``tie`` picks among the tied ones."""
    low = min(load(v) for v in views)
    tied = [v for v in views if load(v) == low]
    return tied[0] if len(tied) == 1 else tie(tied)


def random_tie(rng: np.random.Generator) -> Callable[[Sequence[ReplicaView]], ReplicaView]:
    """Uniform among the tied (verl's ``random.choice``, here through a seeded generator)."""
    return lambda tied: tied[int(rng.integers(len(tied)))]


def rendezvous(key: Hashable, tied: Sequence[ReplicaView]) -> ReplicaView:
    """Highest-random-weight hashing of ``key`` over the tied replicas (vllm-router's
    deterministic tie-break: the same key on the same tied set picks the same replica)."""
    def weight(v: ReplicaView) -> bytes:
        return hashlib.blake2b(f"{key!r}:{v.replica}".encode(), digest_size=8).digest()
    return max(tied, key=weight)


def decide(turn: TurnRequest, replica: int, home: int | None, home_alive: bool) -> TurnDecision:
    """A count router's decision, labelled against the session's ``home`` (its own sticky
    entry, or the turn's ``home`` for routers without one)."""
    if home is None:
        reason = "first"
    elif not home_alive:
        reason = "home-down"
    else:
        reason = "stay" if replica == home else "move"
    return TurnDecision(replica, home is not None and replica != home,
                        turn.uncached_on(replica), 0.0, reason)
