"""One replica's load as the balancer reads it (``core.balancer``, ``core.balance_scan``), and
what a load takes of a replica's cost model (``cost_terms``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from tailsieve.model.replica_config import ReplicaConfig

__all__ = ["CostTerms", "ReplicaLoad", "Running", "cost_terms"]

Running = Sequence[tuple[Hashable, int]]  # (key, context tokens) of the running responses
CostTerms = tuple[Callable[[int], float], float, float, float]  # a load's tau,
# context_s_per_token, prefill_s_per_token and prefill_s
_CONTEXT = itemgetter(1)


@dataclass(slots=True)
class ReplicaLoad:
    """One replica's load and its decode/prefill cost model (read, never changed, by
    ``plan_moves``; not frozen because a check builds one per replica and a frozen
    dataclass is about 7x slower to build)."""

    replica: int
    num_running: int  # b
    context_tokens: float  # C: prompt + generated tokens held by the running responses
    running: Callable[[], Running]  # the running responses, read only when needed
    tau: Callable[[int], float]  # seconds per decode iteration at b running (effective)
    context_s_per_token: float  # k: seconds per iteration per context token held
    prefill_s_per_token: float  # seconds to prefill one uncached prefix token (recompute rate)
    prefill_s: float = 0.0  # fixed cost per admitted continuation, seconds
    accepts: bool = True  # may receive moves (False: e.g. a replica with queued requests)
    pool: int = 0  # moves stay within a pool (the tail pool and the bulk pool differ)
    room_tokens: float = math.inf  # context tokens moves may still bring here (e.g. what
    # admission by KV room leaves unreserved); ``plan_moves`` moves no response whose context
    # exceeds what is left, and counts each move it makes against it

    @classmethod
    def of(cls, replica: int, running: Running, tau: Callable[[int], float],
           context_s_per_token: float, prefill_s_per_token: float, **kw: object) -> ReplicaLoad:
        """A load from an explicit list of ``(key, context tokens)``."""
        items = tuple(running)
        return cls(replica, len(items), float(sum(map(_CONTEXT, items))), lambda: items, tau,
                   context_s_per_token, prefill_s_per_token, **kw)  # type: ignore[arg-type]

    def cost_s(self, b: int, context: float) -> float:
        return self.tau(b) + self.context_s_per_token * context if b > 0 else 0.0


def cost_terms(c: ReplicaConfig) -> CostTerms:
    """What a ``ReplicaLoad`` takes of a replica's cost model: ``tau`` (remembered per batch
    size: the model's scalar ``tau`` goes through numpy), seconds per context token per
    iteration, prefill seconds per uncached token and per continuation."""
    return (functools.cache(c.throughput.tau), c.throughput.context_s_per_token, c.recompute_cost_s(1) - c.prefill_s,
            c.prefill_s)
