"""Per-step records and per-policy summaries of a simulated run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

STEADY_STEPS = 3  # steady step time = mean of the last three regular steps (paper 4.2)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What one step of one policy did."""

    step: int
    makespan_s: float
    tail_time_s: float
    bulk_cut_s: float
    q: int  # tail groups
    m: int  # tail replicas
    num_aborted: int
    num_pinned: int
    wasted_tokens: int
    generated_tokens: int
    lower_bound_s: float  # DESIGN section 3 bound of the delivered batch
    decision_s: float  # protocol + controller time spent on this step (0 for baselines)
    is_warmup: bool
    is_flush: bool
    drawn_ids: tuple[str, ...]  # prompts drawn from the stream this step
    delivered_ids: tuple[str, ...]
    aborted_ids: tuple[str, ...]
    delivered_sizes: tuple[int, ...]  # responses per delivered group
    num_preemptions: int = 0  # KV-capacity preemptions over all replicas this step
    recomputed_tokens: int = 0  # tokens prefilled again after those preemptions
    replica_preemptions: tuple[int, ...] = ()  # per replica (empty when no preemption)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("drawn_ids", "delivered_ids", "aborted_ids", "delivered_sizes",
                  "replica_preemptions"):
            d[k] = list(d[k])
        return d


@dataclass(slots=True)
class PolicyRun:
    """Every step of one policy over the paired prompt stream."""

    policy: str
    records: list[StepRecord] = field(default_factory=list)

    @property
    def regular(self) -> list[StepRecord]:
        """Steps that deliver a full batch (the flush step excluded)."""
        return [r for r in self.records if not r.is_flush]

    @property
    def steady_step_s(self) -> float:
        tail = self.regular[-STEADY_STEPS:]
        return float(np.mean([r.makespan_s for r in tail])) if tail else 0.0

    @property
    def mean_step_s(self) -> float:
        """Mean over regular steps after step 0 (the warm-up of protocol policies; excluded
        for every policy so the comparison stays paired); all steps if that leaves none."""
        rs = [r for r in self.regular if r.step > 0] or self.regular
        return float(np.mean([r.makespan_s for r in rs])) if rs else 0.0

    @property
    def q_trajectory(self) -> list[int]:
        return [r.q for r in self.regular]

    @property
    def m_trajectory(self) -> list[int]:
        return [r.m for r in self.regular]

    @property
    def wasted_token_fraction(self) -> float:
        gen = sum(r.generated_tokens for r in self.records)
        return sum(r.wasted_tokens for r in self.records) / gen if gen else 0.0

    @property
    def lower_bound_ratio(self) -> float:
        """Mean over regular steps of makespan / lower bound of the delivered batch."""
        rs = [r.makespan_s / r.lower_bound_s for r in self.regular if r.lower_bound_s > 0]
        return float(np.mean(rs)) if rs else 0.0

    @property
    def steady_lower_bound_ratio(self) -> float:
        rs = [r.makespan_s / r.lower_bound_s for r in self.regular[-STEADY_STEPS:]
              if r.lower_bound_s > 0]
        return float(np.mean(rs)) if rs else 0.0

    @property
    def preemptions_per_step(self) -> float:
        """Mean KV-capacity preemptions per regular step (all replicas)."""
        rs = self.regular
        return float(np.mean([r.num_preemptions for r in rs])) if rs else 0.0

    @property
    def recomputed_tokens_per_step(self) -> float:
        rs = self.regular
        return float(np.mean([r.recomputed_tokens for r in rs])) if rs else 0.0

    @property
    def max_decision_s(self) -> float:
        return max((r.decision_s for r in self.records), default=0.0)

    @property
    def mean_decision_s(self) -> float:
        return float(np.mean([r.decision_s for r in self.records])) if self.records else 0.0

    def summary(self, uniform: PolicyRun | None = None) -> dict[str, Any]:
        """The per-policy numbers the CLI prints; speedups are paired against ``uniform``."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "steady_step_s": self.steady_step_s,
            "mean_step_s": self.mean_step_s,
            "speedup_vs_uniform": None,
            "mean_speedup_vs_uniform": None,
            "q_trajectory": self.q_trajectory,
            "m_trajectory": self.m_trajectory,
            "wasted_token_fraction": self.wasted_token_fraction,
            "lower_bound_ratio": self.lower_bound_ratio,
            "steady_lower_bound_ratio": self.steady_lower_bound_ratio,
            "max_decision_s": self.max_decision_s,
            "preemptions_per_step": self.preemptions_per_step,
            "recomputed_tokens_per_step": self.recomputed_tokens_per_step,
            "num_steps": len(self.regular),
        }
        if uniform is not None and self.steady_step_s > 0 and self.mean_step_s > 0:
            out["speedup_vs_uniform"] = uniform.steady_step_s / self.steady_step_s
            out["mean_speedup_vs_uniform"] = uniform.mean_step_s / self.mean_step_s
        return out
