"""Predicted pool times ``T_tail(q, m)`` and ``T_bulk(N - q, R - m)`` from response-work
history and the measured throughput model (docs/design.md, "Controller", outer loop).

Each remembered step holds its delivered groups' response lengths, the groups that ran in the
tail pool first (in candidate rank order). For a hypothetical ``q`` the tail pool is predicted to
receive the first ``q`` groups of that step's priority order (its actual tail groups, then its
bulk groups by decreasing work), dealt round-robin onto ``m`` replicas. Because the actual tail
groups come first, the prediction carries the real selector's misses: a long group the cutoff
did not catch stays in the bulk pool. The bulk pool gets the other groups plus ``c = q`` extra
groups standing for the cutoff's: the step's own aborted groups as the cutoff saw them (their
finished responses at their mean length, the unfinished ones running past every delivered
response), or, for a step without a cutoff, its slowest group still running; dealt onto
``R - m`` replicas; the bulk time is when its ``N - q`` delivered groups have completed. Groups
are dealt whole or, with ``spread``, response by response (as the protocol deals them).
Replica times use the all-admit model with the profile's context term (generated tokens, and
prompt tokens where the outcomes report them; the cutoff's stand-ins hold the step's mean
prompt). KV-capacity preemption is not predicted. The makespan of a (q, m) is the
mean over the remembered steps of each step's ``max(T_tail, T_bulk)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailsieve.control.sample_stack import SampleStack
from tailsieve.control.step_sample import StepSample, StepWork
from tailsieve.model.throughput import ThroughputModel

__all__ = ["PoolPrediction", "PoolTimePredictor", "StepSample", "StepWork"]


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
        # the stacked form of the last samples predicted from (keyed by their identities)
        self._stack: tuple[tuple[int, ...], SampleStack] | None = None

    def samples(self, history: Sequence[StepWork]) -> list[StepSample]:
        """Pre-process remembered steps."""
        return [
            StepSample(h.groups, h.num_tail, h.aborted, h.prompt_tokens)
            for h in history if len(h.groups) > 0
        ]

    def predict(self, history: Sequence[StepWork], q: int, m: int) -> PoolPrediction:
        """Average prediction over remembered steps."""
        return self.predict_samples(self.samples(history), q, m)

    def predict_samples(self, samples: Sequence[StepSample], q: int, m: int) -> PoolPrediction:
        """Prediction at (q, m) from pre-processed remembered steps (all in one pass)."""
        if not samples:
            return PoolPrediction(q, m, 0.0, 0.0)
        key = tuple(id(s) for s in samples)
        if self._stack is None or self._stack[0] != key:
            self._stack = (key, SampleStack(samples))
        stack = self._stack[1]
        q_eff = stack.q_effective(q, m, self.num_groups)
        m_eff = m if m > 0 and q > 0 else 0
        tails, bulks = stack.pool_maxima(q_eff, m_eff, self.num_replicas - m_eff, self.spread,
                                         self.tail_model, self.bulk_model)
        return PoolPrediction(q, m, float(np.mean(tails)), float(np.mean(bulks)),
                              tuple(zip(tails, bulks, strict=True)))

    def balanced_q(
        self,
        samples: Sequence[StepSample],
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
