"""Predicted pool times ``T_tail(q, m)`` and ``T_bulk(N - q, R - m)`` from response-work
history and the measured throughput model (DESIGN.md section 5, outer loop).

Each remembered step holds its delivered groups' response lengths, the groups that ran in the
tail pool first (in candidate rank order). For a hypothetical ``q`` the tail pool is predicted to
receive the first ``q`` groups of that step's priority order (its actual tail groups, then its
bulk groups by decreasing work), dealt round-robin onto ``m`` replicas. Because the actual tail
groups come first, the prediction carries the real selector's misses: a long group the cutoff
did not catch stays in the bulk pool. The bulk pool gets the other groups plus ``c = q`` extra
groups standing in for the fresh surplus (population samples at evenly spaced work ranks),
dealt round-robin onto ``R - m`` replicas and cut off when ``N - q`` groups have completed.
Replica times use the all-admit model. Predictions are averaged over the remembered steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_time import segmented_completion_times
from tailsieve.model.throughput import ThroughputModel

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class PoolPrediction:
    """Model-predicted pool times for one (q, m)."""

    q: int  # tail groups
    m: int  # tail replicas
    tail_s: float  # predicted T_tail (0 when m == 0 or q == 0)
    bulk_s: float  # predicted bulk time (cutoff, or last completion when nothing is cut)

    def makespan(self, k_tail: float = 1.0, k_bulk: float = 1.0) -> float:
        """Makespan after correcting each pool by its observed/predicted ratio."""
        return max(self.tail_s * k_tail, self.bulk_s * k_bulk)


@dataclass(frozen=True, slots=True)
class StepWork:
    """Response-work record of one step, as the controller remembers it."""

    groups: list[list[int]]  # delivered groups' response lengths, tail groups first
    num_tail: int  # how many leading groups ran in the tail pool (in candidate rank order)

    def to_dict(self) -> dict[str, object]:
        return {"groups": self.groups, "num_tail": self.num_tail}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> StepWork:
        groups = d["groups"]
        assert isinstance(groups, list)
        return cls([[int(x) for x in g] for g in groups], int(d["num_tail"]))  # type: ignore[call-overload]


class _StepSample:
    """One remembered step, flattened and pre-sorted for fast predictions."""

    __slots__ = ("by_size", "by_work", "flat", "group_of", "num_groups", "offsets", "sizes")

    def __init__(self, groups: Sequence[Sequence[int]], num_tail: int = 0) -> None:
        arrays = [np.asarray(g, dtype=np.int64) for g in groups]
        self.num_groups = len(arrays)
        self.sizes = np.array([a.size for a in arrays], dtype=np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        self.group_of = np.repeat(np.arange(self.num_groups), self.sizes)
        work = np.array([int(a.sum()) for a in arrays], dtype=np.int64)
        bulk = np.arange(num_tail, self.num_groups)
        bulk = bulk[np.argsort(-work[bulk], kind="stable")]
        self.by_work = np.concatenate((np.arange(num_tail), bulk)).astype(np.int64)
        self.by_size = np.argsort(-work, kind="stable")

    def expand(self, group_idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Flat request indices of the given groups, group after group."""
        if group_idx.size == 0:
            return np.zeros(0, dtype=np.int64)
        sizes = self.sizes[group_idx]
        starts = np.repeat(self.offsets[group_idx], sizes)
        within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        return starts + within


class PoolTimePredictor:
    """Predicts pool times for any (q, m) from the last few steps' response lengths."""

    def __init__(
        self,
        num_groups: int,
        num_replicas: int,
        tail_model: ThroughputModel,
        bulk_model: ThroughputModel,
    ) -> None:
        self.num_groups = num_groups
        self.num_replicas = num_replicas
        self.tail_model = tail_model
        self.bulk_model = bulk_model

    def samples(self, history: Sequence[StepWork]) -> list[_StepSample]:
        """Pre-process remembered steps."""
        return [_StepSample(h.groups, h.num_tail) for h in history if len(h.groups) > 0]

    def predict(self, history: Sequence[StepWork], q: int, m: int) -> PoolPrediction:
        """Average prediction over remembered steps."""
        return self.predict_samples(self.samples(history), q, m)

    def predict_samples(self, samples: Sequence[_StepSample], q: int, m: int) -> PoolPrediction:
        if not samples:
            return PoolPrediction(q, m, 0.0, 0.0)
        tails, bulks = [], []
        for s in samples:
            t, b = self._one(s, q, m)
            tails.append(t)
            bulks.append(b)
        return PoolPrediction(q, m, float(np.mean(tails)), float(np.mean(bulks)))

    def _one(self, s: _StepSample, q: int, m: int) -> tuple[float, float]:
        n_groups = s.num_groups
        if m <= 0 or q <= 0:
            q_eff, m_eff = 0, 0
        else:
            q_eff = min(n_groups - 1, max(1, round(q * n_groups / self.num_groups)))
            m_eff = m
        tail_idx = s.by_work[:q_eff]
        tail_s = 0.0
        if q_eff > 0:
            reqs = s.expand(tail_idx)
            rep = np.repeat(np.arange(q_eff) % m_eff, s.sizes[tail_idx])
            tail_s = float(segmented_completion_times(s.flat[reqs], rep, self.tail_model).max())
        in_tail = np.zeros(n_groups, dtype=bool)
        in_tail[tail_idx] = True
        bulk_idx = np.flatnonzero(~in_tail)
        need = bulk_idx.size
        if q_eff > 0:
            ranks = np.linspace(0, n_groups - 1, q_eff).round().astype(np.int64)
            bulk_idx = np.concatenate((bulk_idx, s.by_size[ranks]))
        num_bulk = self.num_replicas - m_eff
        if need <= 0 or num_bulk <= 0:
            return tail_s, 0.0
        reqs = s.expand(bulk_idx)
        slot = np.repeat(np.arange(bulk_idx.size), s.sizes[bulk_idx])
        times = segmented_completion_times(s.flat[reqs], slot % num_bulk, self.bulk_model)
        done = np.zeros(bulk_idx.size)
        np.maximum.at(done, slot, times)
        k = need - 1
        return tail_s, float(np.partition(done, k)[k])

    def balanced_q(
        self,
        samples: Sequence[_StepSample],
        m: int,
        q_lo: int,
        q_hi: int,
        k_tail: float = 1.0,
        k_bulk: float = 1.0,
    ) -> PoolPrediction:
        """The q in ``[q_lo, q_hi]`` minimising the corrected predicted makespan at split ``m``.

        Bisection on the sign of ``T_tail - T_bulk`` (tail time grows with q, bulk time
        shrinks). Where the makespan is flat (set by one long tail group), the largest q within
        0.5% of the best is taken: it moves more work off the bulk pool at no predicted cost.
        """
        if m <= 0:
            return self.predict_samples(samples, 0, 0)
        lo, hi = q_lo, q_hi
        cache: dict[int, PoolPrediction] = {}

        def at(q: int) -> PoolPrediction:
            if q not in cache:
                cache[q] = self.predict_samples(samples, q, m)
            return cache[q]

        while hi - lo > 1:
            mid = (lo + hi) // 2
            p = at(mid)
            if p.tail_s * k_tail < p.bulk_s * k_bulk:
                lo = mid
            else:
                hi = mid
        preds = [at(q) for q in sorted({lo, hi})]
        best = min(p.makespan(k_tail, k_bulk) for p in preds)
        return max(
            (p for p in preds if p.makespan(k_tail, k_bulk) <= best * 1.005), key=lambda p: p.q
        )
