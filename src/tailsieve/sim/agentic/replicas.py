"""The replica side of the agentic simulator: engines, prefix caches, tool waits, views.

One ``ReplicaEngine`` per replica runs the turns (prefill stalls, KV capacity, preemption);
``PrefixCacheModel`` holds what each replica's cache keeps (its capacity is the KV budget
less what the running requests hold, updated at every event); and per replica the sessions
now in a tool call whose last turn ran there. ``views`` turns that into the ``ReplicaView``
list a router reads; a replica's view is rebuilt only when something happened there. The
engines run at each replica's own speed (``configs``: a straggler's are slower); the views
carry the cost models routers price with (``priced_as``: by default the same, as a router
whose ``auto`` profile has fitted each replica's speed; the unslowed configs model one curve
for every replica).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.replica_engine import Completion, ReplicaEngine
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.replica_view import ReplicaView, ViewTable

__all__ = ["Replicas"]


class Replicas:
    """Engines, caches and tool waits of one step's replicas."""

    def __init__(self, configs: Sequence[ReplicaConfig], priority: bool = False,
                 priced_as: Sequence[ReplicaConfig] | None = None) -> None:
        """``priority``: the engines schedule by request priority (vLLM's
        ``--scheduling-policy priority``), else FCFS; ``priced_as``: the replicas as routers
        see them (default ``configs``)."""
        if priced_as is not None and len(priced_as) != len(configs):
            raise ConfigError(f"priced_as has {len(priced_as)} replicas, the step "
                              f"{len(configs)}")
        self.configs = list(configs)
        self.priced = list(priced_as) if priced_as is not None else self.configs  # in views
        self.engines = [ReplicaEngine(c, priority) for c in configs]
        self.cache = PrefixCacheModel([c.kv_capacity_tokens for c in configs])
        self.num_tool = [0] * len(configs)
        self.tool_context = [0.0] * len(configs)
        self.prefill_until_s = [0.0] * len(configs)  # when each replica's prefills end
        self._table: ViewTable | None = None
        self._dirty: set[int] = set(range(len(configs)))
        self._heap: list[tuple[float, int, int]] = []  # (event time, replica, version)
        self._version = [0] * len(configs)

    def __len__(self) -> int:
        return len(self.engines)

    # ----- events --------------------------------------------------------------------
    def touched(self, r: int) -> None:
        """Replica ``r`` changed: its view is stale and its next event is rescheduled."""
        self._dirty.add(r)
        self._version[r] += 1
        t = self.engines[r].next_event_s()
        if t != float("inf"):
            heapq.heappush(self._heap, (t, r, self._version[r]))

    def next_event(self) -> tuple[float, int] | None:
        """``(time, replica)`` of the earliest engine event (None: all idle)."""
        heap = self._heap
        while heap:
            t, r, v = heap[0]
            if v == self._version[r]:
                return t, r
            heapq.heappop(heap)
        return None

    def advance(self, r: int, t: float) -> list[Completion]:
        """Bring replica ``r`` to time ``t``; returns what completed on the way."""
        comps = self.engines[r].advance(t)
        self.fit_cache(r)
        self.touched(r)
        return comps

    def submit(self, r: int, rid: Hashable, num_tokens: int, prompt_tokens: int,
               cached_tokens: int, continuation: bool, now_s: float, priority: int = 0) -> None:
        """Start a turn (or a continuation) on ``r`` at ``now_s`` (``r`` is at ``now_s``);
        ``priority``: lower runs earlier (read under the priority policy only)."""
        cfg = self.configs[r]
        uncached = prompt_tokens - cached_tokens
        stall = (cfg.recompute_cost_s(uncached, cached_tokens) if continuation
                 else cfg.prefill_cost_s(uncached, cached_tokens))
        self.prefill_until_s[r] = max(self.prefill_until_s[r], now_s) + stall
        self.engines[r].submit(rid, num_tokens, prompt_tokens, cached_tokens=cached_tokens,
                               continuation=continuation, priority=priority)
        self.fit_cache(r)
        self.touched(r)

    def enter_tool(self, r: int, context_tokens: float) -> None:
        self.num_tool[r] += 1
        self.tool_context[r] += context_tokens
        self._dirty.add(r)

    def leave_tool(self, r: int, context_tokens: float) -> None:
        self.num_tool[r] -= 1
        self.tool_context[r] -= context_tokens
        self._dirty.add(r)

    def fit_cache(self, r: int) -> None:
        """The cache may hold what the running requests leave of the KV budget."""
        cap = self.configs[r].kv_capacity_tokens
        if cap is not None:
            self.cache.set_capacity(r, int(cap - self.engines[r].kv_tokens()))

    # ----- reads ---------------------------------------------------------------------
    def views(self, now_s: float) -> ViewTable:
        """Every replica as a router sees it (rebuilt where something changed)."""
        if self._table is None:
            self._table = ViewTable([self._view(r, now_s) for r in range(len(self.engines))])
        else:
            for r in self._dirty:
                self._table[r] = self._view(r, now_s)
        self._dirty.clear()
        return self._table

    def _view(self, r: int, now_s: float) -> ReplicaView:
        e, cfg = self.engines[r], self.configs[r]
        lag_s = self.prefill_until_s[r] - now_s
        backlog = lag_s / cfg.prefill_s_per_token if lag_s > 0 and cfg.prefill_s_per_token > 0 \
            else 0.0
        return ReplicaView(r, self.priced[r], e.num_running, max(e.kv_tokens(), 0.0), e.num_waiting,
                           self.num_tool[r], max(self.tool_context[r], 0.0), backlog)

    def preemptions(self) -> tuple[int, int]:
        """(preemptions, recomputed tokens) over all engines."""
        return (sum(e.num_preemptions for e in self.engines),
                sum(e.recomputed_tokens for e in self.engines))
