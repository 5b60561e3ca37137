"""Per-step records and per-policy summaries of a simulated run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tailsieve.core.diagnostics import StepDiagnostics
from tailsieve.sim.steady import STEADY_FROM, STEADY_STEPS, ratios_by_step


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
    diagnostics: StepDiagnostics | None = None  # where the step's time went (core.diagnostics)
    fluid_bound_s: float = 0.0  # fluid perfect-balance bound of the delivered batch
    # (oracle.fluid_bound: no placement, moves at zero cost included, is faster)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("drawn_ids", "delivered_ids", "aborted_ids", "delivered_sizes",
                  "replica_preemptions"):
            d[k] = list(d[k])
        d["diagnostics"] = self.diagnostics_dict()
        return d

    def diagnostics_dict(self) -> dict[str, Any] | None:
        """The step's diagnostics with the derived ratios (None when not recorded)."""
        dg = self.diagnostics
        if dg is None:
            return None
        return {
            "step": self.step, "q": self.q, "m": self.m, "makespan_s": self.makespan_s,
            **asdict(dg), "capture_rate": dg.capture_rate,
            "tail_obs_over_pred": dg.tail_ratio, "bulk_obs_over_pred": dg.bulk_ratio,
        }


@dataclass(slots=True)
class PolicyRun:
    """Every step of one policy over the paired prompt stream."""

    policy: str
    records: list[StepRecord] = field(default_factory=list)

    @property
    def regular(self) -> list[StepRecord]:
        """Steps that deliver a full batch (the flush step excluded)."""
        return [r for r in self.records if not r.is_flush]

    def step_times(self) -> dict[int, float]:
        """Step index -> step time of every regular step."""
        return {r.step: r.makespan_s for r in self.regular}

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
    def moves_per_step(self) -> float:
        """Mean responses moved by continuation per regular step (the balancer)."""
        rs = self.regular
        return float(np.mean([r.diagnostics.num_moves if r.diagnostics else 0 for r in rs])) \
            if rs else 0.0

    @property
    def moved_tokens_per_step(self) -> float:
        rs = self.regular
        return float(np.mean([r.diagnostics.moved_tokens if r.diagnostics else 0
                              for r in rs])) if rs else 0.0

    @property
    def prefill_s_per_step(self) -> float:
        """Mean destination prefill seconds of the moves per regular step."""
        rs = self.regular
        return float(np.mean([r.diagnostics.prefill_s if r.diagnostics else 0.0
                              for r in rs])) if rs else 0.0

    @property
    def max_decision_s(self) -> float:
        return max((r.decision_s for r in self.records), default=0.0)

    @property
    def fluid_bound_steps_s(self) -> list[float]:
        """The fluid perfect-balance bound of each regular step's delivered batch."""
        return [r.fluid_bound_s for r in self.regular]

    @property
    def steady_fluid_bound_s(self) -> float:
        """Mean fluid bound of the last three regular steps (pairs with ``steady_step_s``)."""
        tail = self.regular[-STEADY_STEPS:]
        return float(np.mean([r.fluid_bound_s for r in tail])) if tail else 0.0

    @property
    def fluid_bound_ratio(self) -> float:
        """Summed step time over the summed fluid bound, regular steps (>= 1; 0 when none)."""
        bound = sum(r.fluid_bound_s for r in self.regular)
        return sum(r.makespan_s for r in self.regular) / bound if bound > 0 else 0.0

    def diagnostics_summary(self, first_step: int = 1) -> dict[str, float | None]:
        """Step diagnostics pooled over the regular steps from ``first_step`` (default: after
        the warm-up): observed/predicted pool times (mean of per-step ratios), idle and aborted
        replica-seconds as fractions of the replica-seconds of those steps, capture rate."""
        ds = [(r, r.diagnostics) for r in self.regular if r.step >= first_step and r.diagnostics]

        def mean_or_none(xs: list[float]) -> float | None:
            return float(np.mean(xs)) if xs else None

        def ratio(num: float, den: float) -> float | None:
            return num / den if den > 0 else None

        span = sum(r.makespan_s * d.num_replicas for r, d in ds)
        tail_span = sum(r.makespan_s * r.m for r, d in ds)
        pred_span = [r.makespan_s / p for r, d in ds if (p := d.predicted_makespan_s)]
        return {
            "tail_obs_over_pred": mean_or_none([x for _, d in ds if (x := d.tail_ratio)]),
            "bulk_obs_over_pred": mean_or_none([x for _, d in ds if (x := d.bulk_ratio)]),
            "makespan_obs_over_pred": mean_or_none(pred_span),
            "tail_idle_fraction": ratio(sum(d.tail_idle_replica_s for _, d in ds), tail_span),
            "idle_fraction": ratio(sum(d.idle_replica_s for _, d in ds), span),
            "aborted_replica_fraction": ratio(sum(d.aborted_replica_s for _, d in ds), span),
            "aborted_tokens": float(sum(d.aborted_tokens for _, d in ds)),
            "capture_rate": ratio(float(sum(d.capture_candidates for _, d in ds)),
                                  float(sum(d.capture_k for _, d in ds))),
        }

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
            "moves_per_step": self.moves_per_step,
            "moved_tokens_per_step": self.moved_tokens_per_step,
            "prefill_s_per_step": self.prefill_s_per_step,
            "num_steps": len(self.regular),
            "paired_speedup": None,
            "paired_steady_from": None,
            "diagnostics": self.diagnostics_summary(),
            "fluid_bound_steps_s": self.fluid_bound_steps_s,
            "fluid_bound_total_s": float(sum(self.fluid_bound_steps_s)),
            "step_total_s": float(sum(r.makespan_s for r in self.regular)),
            "steady_fluid_bound_s": self.steady_fluid_bound_s,
            "fluid_bound_ratio": self.fluid_bound_ratio,
        }
        if uniform is not None and self.steady_step_s > 0 and self.mean_step_s > 0:
            out["speedup_vs_uniform"] = uniform.steady_step_s / self.steady_step_s
            out["mean_speedup_vs_uniform"] = uniform.mean_step_s / self.mean_step_s
            ratios = ratios_by_step(uniform.step_times(), self.step_times(), STEADY_FROM)
            out["paired_speedup"] = float(np.mean(list(ratios.values()))) if ratios else None
            out["paired_steady_from"] = STEADY_FROM
        return out
