"""One replica's state as a session router sees it at a decision."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig

__all__ = ["ReplicaView", "ViewTable"]


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica's state as a router sees it at a decision (counts, contexts, its cost
    model); built by the caller from its own bookkeeping (``SessionBook.views``) or, in the
    simulator, from the engines."""

    replica: int
    config: ReplicaConfig  # its cost model (tau(b), context rate k, prefill/recompute)
    num_running: int  # requests decoding now
    context_tokens: float  # context held by them
    num_waiting: int = 0  # requests queued, not yet admitted
    num_tool_waits: int = 0  # sessions whose last turn ran here, now in a tool call
    tool_wait_context_tokens: float = 0.0  # the context those sessions hold
    prefill_backlog_tokens: float = 0.0  # tokens admitted or queued but not yet prefilled
    healthy: bool = True

    def __post_init__(self) -> None:
        if (self.replica >= 0 and self.num_running >= 0 and self.num_waiting >= 0
                and self.num_tool_waits >= 0 and self.context_tokens >= 0
                and self.tool_wait_context_tokens >= 0 and self.prefill_backlog_tokens >= 0):
            return  # the common case, checked at once (views are built per placement)
        if self.replica < 0:
            raise ConfigError(f"replica must be >= 0, got {self.replica}")
        for name in ("num_running", "num_waiting", "num_tool_waits"):
            if getattr(self, name) < 0:
                raise ConfigError(f"replica {self.replica}: {name} must be >= 0, "
                                  f"got {getattr(self, name)}")
        for name in ("context_tokens", "tool_wait_context_tokens", "prefill_backlog_tokens"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"replica {self.replica}: {name} must be >= 0, "
                                  f"got {getattr(self, name)}")

    @property
    def num_in_flight(self) -> int:
        """Requests running or queued: what count routers (verl, SGLang) read as load."""
        return self.num_running + self.num_waiting


class ViewTable(list[ReplicaView]):
    """Views in replica order with their numbers also kept as arrays, updated row by row as
    views are replaced: ``place_turn`` reads the arrays instead of walking every view (a
    caller with many replicas, such as the simulator, keeps one table and replaces the views
    of the replicas that changed)."""

    def __init__(self, views: list[ReplicaView]) -> None:
        super().__init__(views)
        n = len(views)
        self.b = np.zeros(n)  # running + waiting
        self.tool = np.zeros(n)  # tool waits
        self.c = np.zeros(n)  # running context, queued requests at the mean running context
        self.tool_c = np.zeros(n)  # tool-wait context
        self.lag_s = np.zeros(n)  # prefill backlog, seconds
        self.kv = np.full(n, np.inf)  # KV budget, tokens
        self.k = np.zeros(n)  # context seconds per token
        self.pre = np.zeros((3, n))  # first prefill: fixed s, s per token, s per token pair
        self.healthy = np.ones(n, dtype=bool)
        for i, v in enumerate(views):
            self._row(i, v)

    def __setitem__(self, i: int, v: ReplicaView) -> None:  # type: ignore[override]
        super().__setitem__(i, v)
        self._row(i, v)

    def _row(self, i: int, v: ReplicaView) -> None:
        self.b[i] = v.num_running + v.num_waiting
        self.tool[i] = v.num_tool_waits
        self.c[i] = v.context_tokens * (1.0 + v.num_waiting / max(v.num_running, 1))
        self.tool_c[i] = v.tool_wait_context_tokens
        self.lag_s[i] = v.config.prefill_s_per_token * v.prefill_backlog_tokens
        self.kv[i] = v.config.kv_capacity_tokens or np.inf
        self.k[i] = v.config.throughput.context_s_per_token
        cfg = v.config
        self.pre[:, i] = (cfg.prefill_s, cfg.prefill_s_per_token, cfg.prefill_s_per_token_pair)
        self.healthy[i] = v.healthy
