"""verl's ``rebalance_requests`` (PR #6556) as a session router (pure).

verl's fully async rollouter redistributes the in-flight requests in four steps
(``FullyAsyncRollouter.rebalance_requests``): clear the load balancer's sticky cache, abort
every running request on every replica, wait until the balancer counts nothing in flight,
resume generation; each aborted request is retried by its client (a partial rollout: the
prompt plus the tokens generated so far) and acquires the server with the fewest requests in
flight, which then holds it sticky again. verl calls it from the dynamic-scaling policy's
``request_rebalance``, once per training step, right after hybrid replicas were activated:
capacity that holds nothing yet.

A fixed fleet activates nothing; its counterpart here is a replica that ran dry: it holds no
running or queued turn and no session in a tool call while another replica still runs
``min_running`` turns or more. ``VerlRebalance`` is verl's default router
(``session.sticky.VerlSticky``) plus ``should_rebalance`` (that trigger, at most
``max_rebalances`` times per step: verl's once per activation) and ``rebalance`` (the new
pins); the caller that holds the generation (the simulator, ``sim.agentic.step``) aborts
and resumes the turns.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy
from tailsieve.session.sticky import VerlSticky

__all__ = ["VerlRebalance"]


class VerlRebalance(VerlSticky):
    """verl's sticky default with ``rebalance_requests`` when a replica runs dry."""

    policy = SessionPolicy.REBALANCE

    def __init__(self, rng: np.random.Generator, max_rebalances: int = 1,
                 min_running: int = 2) -> None:
        super().__init__(rng)
        if max_rebalances < 0 or min_running < 1:
            raise ConfigError("max_rebalances must be >= 0 and min_running >= 1")
        self.max_rebalances = max_rebalances
        self.min_running = min_running
        self.num_rebalances = 0  # made so far in this rollout (one router per step)
        self._rng = rng

    def should_rebalance(self, views: Sequence[ReplicaView]) -> bool:
        """A healthy replica holds nothing (no turn running or queued, no session in a tool
        call) while another runs ``min_running`` turns or more, and rebalances are left."""
        if self.num_rebalances >= self.max_rebalances:
            return False
        alive = [v for v in views if v.healthy]
        dry = any(v.num_in_flight == 0 and v.num_tool_waits == 0 for v in alive)
        return dry and any(v.num_running >= self.min_running for v in alive)

    def rebalance(self, sessions: Sequence[Hashable], views: Sequence[ReplicaView]) -> dict[
            Hashable, int]:
        """Clear every sticky pin, then pin each aborted session of ``sessions`` (in retry
        order) to the healthy replica with the fewest requests in flight, counting only the
        retries placed so far (every abort has drained), ties at random as verl's
        ``random.choice``. Returns session -> replica."""
        alive = [v.replica for v in views if v.healthy]
        if not alive:
            raise ConfigError("rebalance needs a healthy replica")
        self._home.clear()
        self.num_rebalances += 1
        count = dict.fromkeys(alive, 0)
        out: dict[Hashable, int] = {}
        for s in sessions:
            low = min(count.values())
            tied = [r for r in alive if count[r] == low]
            r = tied[0] if len(tied) == 1 else tied[int(self._rng.integers(len(tied)))]
            count[r] += 1
            self._home[s] = r
            out[s] = r
        return out
