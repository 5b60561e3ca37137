"""The cost model a session router prices a turn with (pure helpers of ``priced``).

A replica's *expected load* counts the sessions that will run there: the requests running or
queued, plus the sessions in a tool call whose previous turn ran there (they come back to it),
weighted by ``SessionSettings.tool_wait_weight``. Its predicted decode iteration cost is
``c = tau(b) + k * C`` for that expected batch ``b`` and context ``C`` (the throughput model of
``model.throughput``; ``tau`` is interpolated between whole batches, as the model does).
"""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.model.throughput import ThroughputModel
from tailsieve.session.replica_view import ReplicaView

__all__ = ["TauTables", "expected_load"]


class TauTables:
    """``tau(b)`` for fractional ``b`` from per-model tables of whole batches (built once per
    decision; ``ThroughputModel.tau`` costs an array operation per call)."""

    def __init__(self, views: Sequence[ReplicaView], top_batch: float) -> None:
        self._tables: dict[int, list[float]] = {}
        self._slopes: dict[int, float] = {}
        size = int(top_batch) + 3
        for v in views:
            model = v.config.throughput
            key = id(model)
            if key not in self._tables:
                self._tables[key] = model.taus(size).tolist()
                self._slopes[key] = model.fit[1]

    def tau(self, model: ThroughputModel, b: float) -> float:
        if b <= 0:
            return 0.0
        table = self._tables[id(model)]
        lo = int(b)
        if lo + 1 >= len(table):
            return table[-1] + self._slopes[id(model)] * (b - (len(table) - 1))
        frac = b - lo
        return table[lo] + (table[lo + 1] - table[lo]) * frac if frac else table[lo]

    def cost(self, view: ReplicaView, b: float, context: float) -> float:
        """Seconds per decode iteration of ``view``'s replica at expected batch ``b`` holding
        ``context`` tokens (0 when nothing runs)."""
        if b <= 0:
            return 0.0
        model = view.config.throughput
        return self.tau(model, b) + model.context_s_per_token * max(context, 0.0)


def expected_load(view: ReplicaView, tool_wait_weight: float) -> tuple[float, float]:
    """``(b, C)``: the expected batch and context of ``view``'s replica (running + queued +
    weighted tool waits)."""
    b = view.num_running + view.num_waiting + tool_wait_weight * view.num_tool_waits
    c = view.context_tokens + tool_wait_weight * view.tool_wait_context_tokens
    return float(b), float(c)


def backlog_s(view: ReplicaView) -> float:
    """Seconds of prefill the replica owes before it decodes again (the linear part)."""
    if view.prefill_backlog_tokens <= 0:
        return 0.0
    return view.config.prefill_s_per_token * view.prefill_backlog_tokens
