"""The count-based session routers users run today (each cited to the code it follows).

They read request or session *counts* only, never the cost of a move:

- ``VerlSticky``: verl 0.9.1's ``GlobalRequestLoadBalancer``
  (``verl/workers/rollout/router.py``): an LRU map request_id -> server; on a miss (or a
  removed server) the server with the fewest requests in flight, ties broken by
  ``random.choice``; in flight = acquired (a turn started) and not released (it ended), so
  a session in a tool call holds nothing.
- ``StickyLeastLoaded``: vllm-router's ``sticky_least_loaded`` policy, which prime-rl runs
  (``src/policies/sticky_least_loaded.rs`` in ``vllm-project/router`` and
  ``PrimeIntellect-ai/router``): sticky per session; a new session goes to the replica with the
  fewest *active sessions* (assigned and not finished: ``finish_session``), ties broken by
  rendezvous hashing of the session id.
- ``AffinityMargin``: verl PR #7435 (``affinity_break_margin``): on a sticky hit the session
  stays while its replica is within ``margin`` requests in flight of the least loaded one,
  else it is re-pinned there; margin 2 "improved all paired workloads" in the PR.
- ``ImbalanceRepin``: verl PR #6533: the sticky binding holds while the pool is balanced by
  SGLang cache_aware's dual rule (``max - min > abs`` and ``max > rel * min`` in flight is
  imbalanced); otherwise the turn is re-pinned to the least loaded. The PR found conservative
  thresholds did nothing and aggressive ones ran 18-20% slower on 50-100K contexts; the
  defaults here (abs 0, rel 1.0: re-pin whenever the pool is uneven) are its most aggressive
  setting, and behave like SGLang's cache_aware as slime's example scripts run it
  (``--sglang-router-balance-abs-threshold 0``).
- ``TurnRoundRobin``: every turn to the next replica, ignoring the cache.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.session.decision import TurnDecision
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import (
    SessionPolicy,
    decide,
    healthy_views,
    least_loaded,
    random_tie,
    rendezvous,
)
from tailsieve.session.turn import TurnRequest

__all__ = ["AffinityMargin", "ImbalanceRepin", "StickyLeastLoaded", "TurnRoundRobin",
           "VerlSticky"]


def _in_flight(v: ReplicaView) -> float:
    return float(v.num_in_flight)


class VerlSticky:
    """verl's default: sticky by trajectory, a new one to the fewest in flight."""

    policy = SessionPolicy.VERL

    def __init__(self, rng: np.random.Generator) -> None:
        self._tie = random_tie(rng)
        self._home: dict[Hashable, int] = {}  # session -> replica (verl's LRU cache)

    def _repin(self, turn: TurnRequest, alive: list[ReplicaView]) -> int:
        r = least_loaded(alive, _in_flight, self._tie).replica
        self._home[turn.session_id] = r
        return r

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        alive = healthy_views(turn, views)
        home = self._home.get(turn.session_id)
        ok = home is not None and any(v.replica == home for v in alive)
        if ok and home is not None and self._stays(home, alive):
            return decide(turn, home, home, ok)
        return decide(turn, self._repin(turn, alive), home, ok)

    def _stays(self, home: int, alive: list[ReplicaView]) -> bool:
        """Whether a session whose home is alive stays there (verl: always)."""
        return True

    def forget(self, session_id: Hashable) -> None:
        self._home.pop(session_id, None)


class AffinityMargin(VerlSticky):
    """verl #7435: stay while within ``margin`` in flight of the least loaded replica."""

    policy = SessionPolicy.MARGIN

    def __init__(self, rng: np.random.Generator, margin: int = 2) -> None:
        super().__init__(rng)
        if margin < 0:
            raise ConfigError(f"affinity margin must be >= 0, got {margin}")
        self.margin = margin

    def _stays(self, home: int, alive: list[ReplicaView]) -> bool:
        low = min(v.num_in_flight for v in alive)
        load = next(v.num_in_flight for v in alive if v.replica == home)
        return load - low <= self.margin


class ImbalanceRepin(VerlSticky):
    """verl #6533: sticky while balanced, re-pinned to the least loaded while imbalanced."""

    policy = SessionPolicy.REPIN

    def __init__(self, rng: np.random.Generator, balance_abs_threshold: int = 0,
                 balance_rel_threshold: float = 1.0) -> None:
        super().__init__(rng)
        if balance_abs_threshold < 0 or balance_rel_threshold < 1:
            raise ConfigError("balance_abs_threshold must be >= 0 and balance_rel_threshold "
                              ">= 1")
        self.abs_threshold = balance_abs_threshold
        self.rel_threshold = balance_rel_threshold

    def _stays(self, home: int, alive: list[ReplicaView]) -> bool:
        return not imbalanced(alive, self.abs_threshold, self.rel_threshold)


def imbalanced(views: Sequence[ReplicaView], abs_threshold: float, rel_threshold: float) -> bool:
    """SGLang cache_aware's rule on requests in flight: ``max - min > abs`` and
    ``max > rel * min``."""
    loads = [v.num_in_flight for v in views]
    hi, lo = max(loads), min(loads)
    return hi - lo > abs_threshold and hi > rel_threshold * lo


class StickyLeastLoaded:
    """vllm-router's sticky_least_loaded (prime-rl): fewest active sessions, rendezvous ties."""

    policy = SessionPolicy.STICKY_LEAST_LOADED

    def __init__(self) -> None:
        self._home: dict[Hashable, int] = {}
        self._count: dict[int, int] = {}  # replica -> active sessions

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        alive = healthy_views(turn, views)
        home = self._home.get(turn.session_id)
        ok = home is not None and any(v.replica == home for v in alive)
        if ok and home is not None:
            return decide(turn, home, home, True)
        if home is not None:
            self._count[home] -= 1
        key = turn.session_id
        r = least_loaded(alive, lambda v: float(self._count.get(v.replica, 0)),
                         lambda tied: rendezvous(key, tied)).replica
        self._home[key] = r
        self._count[r] = self._count.get(r, 0) + 1
        return decide(turn, r, home, ok)

    def forget(self, session_id: Hashable) -> None:
        home = self._home.pop(session_id, None)
        if home is not None:
            self._count[home] -= 1


class TurnRoundRobin:
    """Every turn to the next healthy replica in turn, wherever its prefix is cached."""

    policy = SessionPolicy.ROUND_ROBIN

    def __init__(self) -> None:
        self._next = 0

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        alive = healthy_views(turn, views)
        v = alive[self._next % len(alive)]
        self._next += 1
        home_ok = turn.home is not None and any(x.replica == turn.home for x in alive)
        return decide(turn, v.replica, turn.home, home_ok)

    def forget(self, session_id: Hashable) -> None:
        return None
