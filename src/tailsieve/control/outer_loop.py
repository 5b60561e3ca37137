"""Outer loop: choose the replica split m by marginal-capacity balance (docs/design.md, "Controller").

Every split within ``m_radius`` of the current one is predicted at its own balanced q with the
response-work history and the throughput model, each pool corrected by its observed/predicted
ratio. m = 0 (no tail pool: every pool-less step deals all groups over all replicas, the
"balance" mode when groups are spread) is always a candidate. The controller moves at most one
replica per decision toward the best split (or straight to m = 0 when that is best), and only
when the predicted gain exceeds ``m_gain_threshold``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailsieve.control.config import ControllerConfig
from tailsieve.control.predictor import PoolPrediction, PoolTimePredictor, StepWork


@dataclass(frozen=True, slots=True)
class OuterDecision:
    """Outcome of one outer-loop evaluation."""

    new_m: int  # split for the coming steps (== m when unchanged)
    new_q: int  # balanced q at new_m
    predicted: dict[int, float]  # corrected predicted makespan per evaluated split
    predicted_gain: float  # relative gain of the best split over the current one


class OuterLoop:
    """Evaluates splits within the radius and moves one replica when worth it."""

    def __init__(self, config: ControllerConfig, predictor: PoolTimePredictor) -> None:
        self.config = config
        self.predictor = predictor

    def candidates(self, m: int) -> list[int]:
        """Splits within ``m_radius`` of ``m``, plus m = 0 (no tail pool: balance) from
        anywhere when ``allow_uniform``."""
        cfg = self.config
        lo = max(0 if cfg.allow_uniform else 1, m - cfg.m_radius)
        hi = min(cfg.num_replicas - 1, m + cfg.m_radius)
        near = list(range(lo, hi + 1))
        return [0, *near] if cfg.allow_uniform and lo > 0 else near

    def evaluate(
        self,
        history: Sequence[StepWork],
        m: int,
        k_tail: float,
        k_bulk: float,
        q: int | None = None,
        samples: Sequence[Any] | None = None,
        cache: dict[tuple[int, int], PoolPrediction] | None = None,
    ) -> dict[int, PoolPrediction]:
        """Each split within the radius at its own balanced q (``q`` at ``m`` seeds the search)."""
        cfg = self.config
        smp = samples if samples is not None else self.predictor.samples(history)
        memo = cache if cache is not None else {}
        out: dict[int, PoolPrediction] = {}
        for mm in self.candidates(m):
            hint = None if not q or not m or not mm else max(mm, round(q * mm / m))
            out[mm] = self.predictor.balanced_q(
                smp,
                mm,
                cfg.q_floor(mm),
                max(cfg.q_floor(mm), min(cfg.q_cap, cfg.max_groups_per_tail_replica * mm)),
                k_tail=k_tail,
                k_bulk=k_bulk,
                hint=hint,
                cache=memo,
                rel_tol=0.0 if mm == m else cfg.outer_q_tolerance,
            )
        return out

    def decide(
        self,
        history: Sequence[StepWork],
        m: int,
        q: int,
        k_tail: float,
        k_bulk: float,
        samples: Sequence[Any] | None = None,
        cache: dict[tuple[int, int], PoolPrediction] | None = None,
        k_uniform: float = 1.0,
    ) -> OuterDecision:
        preds = self.evaluate(history, m, k_tail, k_bulk, q, samples, cache)
        spans, best = _ranked(preds, m, k_tail, k_bulk, k_uniform)
        current = spans.get(m, 0.0)
        gain = (current - spans[best]) / current if current > 0 else 0.0
        if best == m or gain <= self.config.m_gain_threshold:
            return OuterDecision(m, q, spans, gain)
        # leaving isolation for balance is one decision; between splits one replica at a time
        new_m = 0 if best == 0 else m + (1 if best > m else -1)
        new_q = preds[new_m].q if new_m in preds else q
        return OuterDecision(new_m, new_q if new_m > 0 else 0, spans, gain)

    def best_split(
        self,
        history: Sequence[StepWork],
        m: int,
        q: int,
        k_tail: float,
        k_bulk: float,
        k_uniform: float = 1.0,
    ) -> tuple[int, int]:
        """The predicted best (m, q) within the radius of ``m``, without threshold or one-step
        limit: the re-plan after the replica count changed."""
        preds = self.evaluate(history, m, k_tail, k_bulk, q)
        best = _ranked(preds, m, k_tail, k_bulk, k_uniform)[1]
        return best, preds[best].q if best > 0 else 0


def _ranked(
    preds: dict[int, PoolPrediction], m: int, k_tail: float, k_bulk: float, k_uniform: float
) -> tuple[dict[int, float], int]:
    """The corrected makespan of every split, and the best split (ties: the nearest to ``m``)."""
    # the corrections describe the selector's pools; uniform routing has no selector, so its
    # prediction (m = 0) is compared uncorrected, except for what moves while the step runs
    # (the balancer) gained there: ``k_uniform``, observed/predicted of balanced m = 0 steps
    spans = {mm: p.makespan(k_tail, k_bulk) if mm > 0 else p.makespan() * k_uniform
             for mm, p in preds.items()}
    return spans, min(spans, key=lambda mm: (spans[mm], abs(mm - m)))
