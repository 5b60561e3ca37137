"""Mid-turn moves by continuation in the agentic simulator: what one check plans.

At a check every replica has been brought to the moment; ``core.balancer.plan_moves`` is
asked for moves of running turns (the engines' running requests with their contexts, keyed
``(session, piece)``), priced with what each replica's prefix cache holds of each. The loads
are ``session.midturn.move_loads`` over the replicas' views, as the live gateway builds
them over its ``SessionBook`` (tool waits in their home's load, KV room, admission's room,
replicas with queued requests left out); only running turns move. The step
(``TurnStepSim.check``) makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from tailsieve.core.balancer import Move, ReplicaLoad, plan_moves
from tailsieve.session.midturn import move_loads
from tailsieve.sim.agentic.replicas import Replicas

__all__ = ["MovePlanner"]


class MovePlanner:
    """Plans the moves of one check over ``Replicas`` (``group_of[i]``: session ``i``'s
    group, the key of its shared prompt in the caches)."""

    def __init__(self, reps: Replicas, group_of: Sequence[Hashable]) -> None:
        self.reps = reps
        self.group_of = group_of
        self._taus: list[Callable[[int], float]] = [
            cfg.throughput.taus(4096).tolist().__getitem__ for cfg in reps.priced]
        self._ctx: dict[Hashable, int] = {}

    def loads(self, now_s: float, exclude: Callable[[Hashable], bool] | None = None,
              rooms: Sequence[float] | None = None) -> list[ReplicaLoad]:
        """The loads of the replicas where none waits, at ``now_s`` (every replica brought to
        it); ``exclude(key)``: running requests that may not move (still counted in the
        load); ``rooms``: the context each replica may take (``KvAdmission.rooms``; None: no
        bound)."""
        running = [e.running_contexts() for e in self.reps.engines]
        self._ctx = {k: n for items in running for k, n in items}
        if exclude is not None:
            running = [[(k, n) for k, n in items if not exclude(k)] for items in running]
        return move_loads(self.reps.views(now_s), running, self._taus, rooms=rooms)

    def cached(self, key: Hashable, replica: int) -> int:
        i = _session(key)
        return self.reps.cache.cached(replica, i, self.group_of[i], self._ctx.get(key, 0))

    def cached_on(self, key: Hashable) -> Mapping[int, int]:
        i = _session(key)
        return self.reps.cache.cached_on(i, self.group_of[i], self._ctx.get(key, 0))

    def plan(self, now_s: float, horizon_s: float, seam_s: float, max_moves: int,
             exclude: Callable[[Hashable], bool] | None = None,
             rooms: Sequence[float] | None = None) -> list[Move]:
        """The moves of a check at ``now_s`` (``loads``' arguments)."""
        return plan_moves(self.loads(now_s, exclude, rooms), horizon_s, seam_s, max_moves,
                          self.cached, self.cached_on)


def _session(key: Hashable) -> int:
    assert isinstance(key, tuple)
    return int(key[0])
