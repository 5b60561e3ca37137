"""Mid-turn moves by continuation in the agentic simulator: what one check plans.

At a check every replica has been brought to the moment; ``core.balancer.plan_moves`` is
asked for moves of running turns (the engines' running requests with their contexts, keyed
``(session, piece)``), priced with what each replica's prefix cache holds of each. A
replica's load counts, beside its running turns, the sessions in a tool call whose home it is
(they come back to it, as ``place_turn`` counts them); only running turns move. The step
(``TurnStepSim.check``) makes them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from tailsieve.core.balancer import Move, ReplicaLoad, plan_moves
from tailsieve.session.pricing import recompute_rate
from tailsieve.sim.agentic.replicas import Replicas

__all__ = ["MovePlanner"]


class MovePlanner:
    """Plans the moves of one check over ``Replicas`` (``group_of[i]``: session ``i``'s
    group, the key of its shared prompt in the caches)."""

    def __init__(self, reps: Replicas, group_of: Sequence[Hashable]) -> None:
        self.reps = reps
        self.group_of = group_of
        self._taus: list[Callable[[int], float]] = [
            cfg.throughput.taus(4096).tolist().__getitem__ for cfg in reps.configs]
        self._ctx: dict[Hashable, int] = {}

    def loads(self) -> list[ReplicaLoad]:
        reps = self.reps
        out = []
        self._ctx = {}
        for r, (e, cfg) in enumerate(zip(reps.engines, reps.configs, strict=True)):
            running = e.running_contexts()
            self._ctx.update(running)
            kv = e.kv_tokens()
            out.append(ReplicaLoad(
                r, e.num_running + reps.num_tool[r], kv + max(reps.tool_context[r], 0.0),
                _const(running), self._taus[r],
                cfg.throughput.context_s_per_token, recompute_rate(cfg, kv / max(e.num_running, 1)),
                cfg.prefill_s, self._accepts(r)))
        return out

    def _accepts(self, r: int) -> bool:
        """A replica takes moves while its KV has room for one more context of its mean
        size (a move into a full replica only preempts another)."""
        e, cap = self.reps.engines[r], self.reps.configs[r].kv_capacity_tokens
        if cap is None or not e.num_running:
            return True
        kv = e.kv_tokens()
        return kv + kv / e.num_running <= cap

    def cached(self, key: Hashable, replica: int) -> int:
        i = _session(key)
        return self.reps.cache.cached(replica, i, self.group_of[i], self._ctx.get(key, 0))

    def cached_on(self, key: Hashable) -> Mapping[int, int]:
        i = _session(key)
        return self.reps.cache.cached_on(i, self.group_of[i], self._ctx.get(key, 0))

    def plan(self, horizon_s: float, seam_s: float, max_moves: int) -> list[Move]:
        """The moves of a check among the replicas with nothing queued (where requests
        wait for KV space, a turn moved away only lets a queued one in: no gain)."""
        loads = [ld for ld in self.loads() if not self.reps.engines[ld.replica].num_waiting]
        return plan_moves(loads, horizon_s, seam_s, max_moves, self.cached, self.cached_on)


def _session(key: Hashable) -> int:
    assert isinstance(key, tuple)
    return int(key[0])


def _const(items: list[tuple[Hashable, int]]) -> Callable[[], list[tuple[Hashable, int]]]:
    return lambda: items
