"""Predicted pool times ``T_tail(q, m)`` and ``T_bulk(N - q, R - m)`` from response-work
history and the measured throughput model (DESIGN.md section 5, outer loop).

Each remembered step holds its delivered groups' response lengths, the groups that ran in the
tail pool first (in candidate rank order). For a hypothetical ``q`` the tail pool is predicted to
receive the first ``q`` groups of that step's priority order (its actual tail groups, then its
bulk groups by decreasing work), dealt round-robin onto ``m`` replicas. Because the actual tail
groups come first, the prediction carries the real selector's misses: a long group the cutoff
did not catch stays in the bulk pool. The bulk pool gets the other groups plus ``c = q`` extra
groups that are still running at the cutoff (the groups a cutoff aborts are, by construction, the
slowest; what the history knows of them is only that they outlasted the delivered ones), dealt
round-robin onto ``R - m`` replicas; the bulk time is when its ``N - q`` delivered groups have
completed.
Replica times use the all-admit model. Predictions are averaged over the remembered steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_time import sorted_segment_completion_times
from tailsieve.model.throughput import ThroughputModel

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# length standing in for a response still running at the cutoff (never completes before it)
_RUNNING_TOKENS = 1e9


@dataclass(frozen=True, slots=True)
class PoolPrediction:
    """Model-predicted pool times for one (q, m)."""

    q: int  # tail groups
    m: int  # tail replicas
    tail_s: float  # predicted T_tail (0 when m == 0 or q == 0), mean over remembered steps
    bulk_s: float  # predicted bulk time (cutoff, or last completion when nothing is cut), mean
    per_step: tuple[tuple[float, float], ...] = ()  # (tail, bulk) of each remembered step

    def makespan(self, k_tail: float = 1.0, k_bulk: float = 1.0) -> float:
        """Mean over remembered steps of ``max(T_tail * k_tail, T_bulk * k_bulk)``, each pool
        corrected by its observed/predicted ratio. The mean of per-step maxima, not the max of
        the mean pool times: where the bottleneck alternates between the pools from step to
        step, the latter is optimistic (uniform routing, one pool, has no such bias)."""
        if not self.per_step:
            return max(self.tail_s * k_tail, self.bulk_s * k_bulk)
        return sum(max(t * k_tail, b * k_bulk) for t, b in self.per_step) / len(self.per_step)


@dataclass(frozen=True, slots=True)
class StepWork:
    """Response-work record of one step, as the controller remembers it."""

    groups: list[list[int]]  # delivered groups' response lengths, tail groups first
    num_tail: int  # how many leading groups ran in the tail pool (in candidate rank order)
    aborted: list[tuple[int, int]] = field(default_factory=list)  # per aborted group:
    # (responses finished before the cutoff, their tokens), in abort order

    def to_dict(self) -> dict[str, object]:
        return {"groups": self.groups, "num_tail": self.num_tail,
                "aborted": [list(a) for a in self.aborted]}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> StepWork:
        groups = d["groups"]
        assert isinstance(groups, list)
        raw = d.get("aborted", [])
        assert isinstance(raw, list)
        return cls([[int(x) for x in g] for g in groups], int(d["num_tail"]),  # type: ignore[call-overload]
                   [(int(a[0]), int(a[1])) for a in raw])


class _StepSample:
    """One remembered step, flattened and pre-sorted for fast predictions."""

    __slots__ = ("aborted", "asc_group", "asc_len", "asc_resp", "by_work", "group_size",
                 "num_groups")

    def __init__(
        self,
        groups: Sequence[Sequence[int]],
        num_tail: int = 0,
        aborted: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.num_groups = len(groups)
        sizes = np.fromiter((len(g) for g in groups), dtype=np.int64, count=self.num_groups)
        flat = np.fromiter((x for g in groups for x in g), dtype=np.float64, count=int(sizes.sum()))
        group_of = np.repeat(np.arange(self.num_groups), sizes)
        first = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        resp = np.arange(flat.size, dtype=np.int64) - np.repeat(first, sizes)
        work = np.bincount(group_of, weights=flat, minlength=self.num_groups)
        asc = np.argsort(flat, kind="stable")
        self.asc_len = flat[asc]
        self.asc_group = group_of[asc]
        self.asc_resp = resp[asc]
        bulk = np.arange(num_tail, self.num_groups)
        bulk = bulk[np.argsort(-work[bulk], kind="stable")]
        self.by_work = np.concatenate((np.arange(num_tail), bulk)).astype(np.int64)
        self.group_size = max(1, round(float(sizes.mean()))) if self.num_groups else 1
        n = self.group_size
        # each aborted group as the cutoff saw it: finished responses (their mean length),
        # the others running past every delivered response
        self.aborted = [
            np.array([t / f] * min(f, n - 1) + [_RUNNING_TOKENS] * (n - min(f, n - 1)))
            if f > 0 else np.full(n, _RUNNING_TOKENS)
            for f, t in aborted
        ]
        if not self.aborted and self.num_groups and bool(np.all(sizes == n)):
            # a step without a cutoff: the groups a cutoff would abort are the slowest ones,
            # so its longest group (by its longest response), still running, stands in
            slowest = int(np.argmax(flat.reshape(self.num_groups, n).max(axis=1)))
            grp = np.sort(flat[slowest * n:(slowest + 1) * n])
            grp[-1] = _RUNNING_TOKENS
            self.aborted = [grp]

    def pool_times(
        self,
        slot_of_group: IntArray,
        num_replicas: int,
        model: ThroughputModel,
        extra: int = 0,
        spread: bool = False,
    ) -> tuple[FloatArray, IntArray]:
        """Completion time of every request of the groups given a slot (``-1`` = absent) by
        ``slot_of_group``; slot ``k`` runs on replica ``k % num_replicas`` (``spread``:
        response ``j`` of slot ``k`` on replica ``(k * n + j) % num_replicas``). ``extra`` more
        groups (the slots after the last mapped one) hold their replicas' batch slots for the
        whole horizon: groups still running at the cutoff. Returns (times, slot) per request,
        both sorted by (replica, length)."""
        req = slot_of_group[self.asc_group]
        keep = req >= 0
        length, slot, resp = self.asc_len[keep], req[keep], self.asc_resp[keep]
        n = self.group_size
        resort = False
        if extra > 0:
            first = int(slot.max()) + 1 if slot.size else 0
            if self.aborted:
                # the step's own aborted groups (cycled): finished responses, then running ones
                ex = np.concatenate([self.aborted[i % len(self.aborted)] for i in range(extra)])
                resort = True
            else:
                # longer than every real response, so appending keeps the lengths sorted
                ex = np.full(extra * n, _RUNNING_TOKENS)
            length = np.concatenate((length, ex))
            slot = np.concatenate((slot, np.repeat(np.arange(first, first + extra), n)))
            resp = np.concatenate((resp, np.tile(np.arange(n), extra)))
        pos = slot * n + resp if spread else slot
        rep = (pos % num_replicas).astype(np.int16)
        order = np.lexsort((length, rep)) if resort else np.argsort(rep, kind="stable")
        return sorted_segment_completion_times(length[order], rep[order], model), slot[order]


class PoolTimePredictor:
    """Predicts pool times for any (q, m) from the last few steps' response lengths."""

    def __init__(
        self,
        num_groups: int,
        num_replicas: int,
        tail_model: ThroughputModel,
        bulk_model: ThroughputModel,
        spread: bool = False,
    ) -> None:
        self.num_groups = num_groups
        self.num_replicas = num_replicas
        self.tail_model = tail_model
        self.bulk_model = bulk_model
        self.spread = spread  # the protocol deals single responses, not whole groups

    def samples(self, history: Sequence[StepWork]) -> list[_StepSample]:
        """Pre-process remembered steps."""
        return [
            _StepSample(h.groups, h.num_tail, h.aborted) for h in history if len(h.groups) > 0
        ]

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
        return PoolPrediction(q, m, float(np.mean(tails)), float(np.mean(bulks)),
                              tuple(zip(tails, bulks, strict=True)))

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
            tail_slot = np.full(n_groups, -1, dtype=np.int64)
            tail_slot[tail_idx] = np.arange(q_eff)
            times, _ = s.pool_times(tail_slot, m_eff, self.tail_model, spread=self.spread)
            tail_s = float(times.max())
        num_bulk = self.num_replicas - m_eff
        need = n_groups - q_eff
        if need <= 0 or num_bulk <= 0:
            return tail_s, 0.0
        in_tail = np.zeros(n_groups, dtype=bool)
        in_tail[tail_idx] = True
        bulk_slot = np.full(n_groups, -1, dtype=np.int64)
        bulk_slot[~in_tail] = np.arange(need)
        times, slot = s.pool_times(
            bulk_slot, num_bulk, self.bulk_model, extra=q_eff, spread=self.spread
        )
        return tail_s, float(times[slot < need].max())

    def balanced_q(
        self,
        samples: Sequence[_StepSample],
        m: int,
        q_lo: int,
        q_hi: int,
        k_tail: float = 1.0,
        k_bulk: float = 1.0,
        hint: int | None = None,
        cache: dict[tuple[int, int], PoolPrediction] | None = None,
        rel_tol: float = 0.0,
    ) -> PoolPrediction:
        """The q in ``[q_lo, q_hi]`` minimising the corrected predicted makespan at split ``m``.

        Bisection on the sign of ``T_tail - T_bulk`` (tail time grows with q, bulk time
        shrinks). Where the makespan is flat (set by one long tail group), the largest q within
        0.5% of the best is taken: it moves more work off the bulk pool at no predicted cost.
        ``hint`` (a likely answer) narrows the bracket first; ``cache`` memoises predictions by
        ``(q, m)`` across calls on the same samples. ``rel_tol`` stops the bisection once the
        bracket is within that fraction of q (a coarse answer for comparing splits).
        """
        if m <= 0:
            return self.predict_samples(samples, 0, 0)
        lo, hi = q_lo, q_hi
        memo = cache if cache is not None else {}

        def at(q: int) -> PoolPrediction:
            if (q, m) not in memo:
                memo[(q, m)] = self.predict_samples(samples, q, m)
            return memo[(q, m)]

        if hint is not None and lo < hint < hi:
            # bracket around the hint first: usually two evaluations instead of log2(range)
            h = at(hint)
            if h.tail_s * k_tail < h.bulk_s * k_bulk:
                lo = hint
                probe = min(hi, 2 * hint)
                if probe < hi and at(probe).tail_s * k_tail >= at(probe).bulk_s * k_bulk:
                    hi = probe
            else:
                hi = hint
                probe = max(lo, hint // 2)
                if probe > lo and at(probe).tail_s * k_tail < at(probe).bulk_s * k_bulk:
                    lo = probe

        while hi - lo > max(1, int(lo * rel_tol)):
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
