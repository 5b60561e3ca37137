"""The cost model a session router prices a turn with (pure helpers, vectorized over replicas).

A replica's *expected load* counts the sessions that will run there: the requests running or
queued, plus the sessions in a tool call whose previous turn ran there (they come back to it),
weighted by ``SessionSettings.tool_wait_weight``. Its predicted decode iteration cost is
``c = tau(b) + k * C`` for that expected batch ``b`` and context ``C`` (the throughput model of
``model.throughput``, interpolated at fractional ``b`` as the model does). Queued requests
are counted with the mean context of the running ones.

KV capacity: when the expected context ``C`` exceeds the replica's KV budget ``K``
(``ReplicaConfig.kv_capacity_tokens``), only a share ``f = K / C`` of the sessions can hold
their KV at once and the rest wait or are preempted, so each advances ``f`` times as often:
``c = (tau(f b) + k f C) / f``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.replica_view import ReplicaView, ViewTable

__all__ = ["Loads", "recompute_rate"]

FloatArray = npt.NDArray[np.float64]


class Loads:
    """Every replica's expected batch and context, and the costs they imply."""

    def __init__(self, views: Sequence[ReplicaView], tool_wait_weight: float,
                 table: ViewTable | None = None,
                 rows: npt.NDArray[np.intp] | None = None) -> None:
        """``table``: the ``ViewTable`` the views are (its arrays are read instead), or with
        ``rows``, the table they were taken from at those rows (e.g. its healthy ones)."""
        w = tool_wait_weight
        self.views = views
        models = [v.config.throughput for v in views]
        self._same = all(m is models[0] for m in models)
        self._models = models
        if table is not None:
            at = slice(None) if rows is None else rows
            self.b = table.b[at] + w * table.tool[at]
            self.c = table.c[at] + w * table.tool_c[at]
            self.kv, self.backlog_s, self.k = table.kv[at], table.lag_s[at], table.k[at]
            self.pre = table.pre[:, at]
            return
        self.pre = np.array([(v.config.prefill_s, v.config.prefill_s_per_token,
                              v.config.prefill_s_per_token_pair) for v in views]).T
        self.b = np.array([v.num_running + v.num_waiting + w * v.num_tool_waits for v in views],
                          dtype=np.float64)
        self.c = np.array([v.context_tokens * (1.0 + v.num_waiting / max(v.num_running, 1))
                           + w * v.tool_wait_context_tokens for v in views], dtype=np.float64)
        self.kv = np.array([v.config.kv_capacity_tokens or np.inf for v in views],
                           dtype=np.float64)
        self.backlog_s = np.array([v.config.prefill_s_per_token * v.prefill_backlog_tokens
                                   for v in views], dtype=np.float64)
        self.k = np.array([m.context_s_per_token for m in models], dtype=np.float64)

    def prefill(self, context_tokens: int, cached: FloatArray) -> FloatArray:
        """Seconds each replica takes to prefill a prompt of ``context_tokens`` of which it
        holds ``cached`` leading tokens (``ReplicaConfig.prefill_cost_s``, vectorized)."""
        n = context_tokens - cached
        end = float(context_tokens)
        pairs = (end * (end - 1.0) - cached * (cached - 1.0)) / 2.0
        return self.pre[0] + self.pre[1] * n + self.pre[2] * np.where(n > 0, pairs, 0.0)

    def tau(self, b: FloatArray) -> FloatArray:
        """``tau`` of every replica at its entry of ``b`` (0 where ``b <= 0``)."""
        if self._same:
            return self._models[0].tau_array(b)
        models = self._models * (b.size // len(self._models))  # costs() asks for two copies
        return np.array([m.tau(float(x)) for m, x in zip(models, b, strict=True)])

    def costs(self, add_tokens: float) -> tuple[FloatArray, FloatArray]:
        """``(without, with)``: every replica's cost as it is, and with one more session
        holding ``add_tokens`` of context (one interpolation for both)."""
        n = self.b.size
        b = np.concatenate((self.b, self.b + 1.0))
        c = np.maximum(np.concatenate((self.c, self.c + add_tokens)), 0.0)
        kv = np.concatenate((self.kv, self.kv))
        f = np.minimum(1.0, kv / np.maximum(c, 1.0))
        k = np.concatenate((self.k, self.k))
        cost = np.where(b > 0, (self.tau(b * f) + k * c * f) / f, 0.0)
        return cost[:n], cost[n:]


def recompute_rate(config: ReplicaConfig, context_tokens: float) -> float:
    """Seconds per recomputed token of a prefix of about ``context_tokens`` tokens (what
    ``core.balancer`` prices a continuation with: the causal-attention term makes long
    prefixes dearer per token, so the rate is taken at that size)."""
    n = max(int(context_tokens), 1)
    return (config.recompute_cost_s(n) - config.prefill_s) / n
