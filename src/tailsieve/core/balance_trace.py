"""A record of every re-balance check of a step: what it saw and what it decided (pure).

The simulator (``sim.movepath``) and the live rebalancer (``runtime.rebalancer``) call the same
planner (``core.balance_check.plan_check``) on ``ReplicaLoad`` s they build each in their own
way. A ``BalanceTrace`` given to either records, per check, the inputs the planner saw (per
replica: running responses and context tokens; the horizon and seam) and its decision (the
moves planned, and how many of them took effect), so a live step and the simulator's replay of
the same plan can be compared check by check (``compare``): where their views of the state
differ, their moves differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tailsieve.core.balancer import Move, ReplicaLoad
from tailsieve.errors import ConfigError

__all__ = ["BalanceTrace", "CheckRecord", "compare"]


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One check: its time on the step's clock, the loads it read, its decision."""

    t_s: float
    num_running: tuple[int, ...]  # per replica (in the order of ``replicas``)
    context_tokens: tuple[float, ...]
    replicas: tuple[int, ...]
    horizon_s: float
    seam_s: float
    planned: tuple[tuple[int, int, int], ...]  # (src, dst, prefix tokens) of each planned move
    made: int  # of them, moves the executor accepted

    def __post_init__(self) -> None:
        if not len(self.num_running) == len(self.context_tokens) == len(self.replicas):
            raise ConfigError("a check record needs one count and one context per replica")
        if not 0 <= self.made <= len(self.planned):
            raise ConfigError(f"made {self.made} of {len(self.planned)} planned moves")

    @property
    def imbalance(self) -> int:
        """Most minus fewest running responses over the replicas."""
        return max(self.num_running, default=0) - min(self.num_running, default=0)

    def as_dict(self) -> dict[str, Any]:
        return {"t_s": round(self.t_s, 4), "num_running": list(self.num_running),
                "context_tokens": [round(c, 1) for c in self.context_tokens],
                "replicas": list(self.replicas), "horizon_s": round(self.horizon_s, 4),
                "planned": [list(m) for m in self.planned], "made": self.made}


@dataclass(slots=True)
class BalanceTrace:
    """Every check of one step, in order, and the moves that took effect."""

    checks: list[CheckRecord] = field(default_factory=list)
    num_effective: int = 0  # moves that took effect (a response began a piece elsewhere)

    def record(self, t_s: float, loads: Sequence[ReplicaLoad], horizon_s: float,
               seam_s: float, planned: Sequence[Move], made: int) -> None:
        """One check's inputs (``loads`` as the planner got them, read before it moved
        anything) and decision."""
        self.checks.append(CheckRecord(
            t_s, tuple(ld.num_running for ld in loads),
            tuple(float(ld.context_tokens) for ld in loads),
            tuple(ld.replica for ld in loads), horizon_s, seam_s,
            tuple((m.src, m.dst, m.prefix_tokens) for m in planned), made))

    def took_effect(self) -> None:
        """A move took effect (its response's next piece began on the destination)."""
        self.num_effective += 1

    @property
    def num_planned(self) -> int:
        return sum(len(c.planned) for c in self.checks)

    @property
    def num_made(self) -> int:
        return sum(c.made for c in self.checks)

    def summary(self) -> dict[str, Any]:
        """Counts: checks, checks that moved, planned / accepted / effective moves, the mean
        count imbalance the checks saw, and the mean context per running response."""
        n = len(self.checks)
        running = sum(sum(c.num_running) for c in self.checks)
        ctx = sum(sum(c.context_tokens) for c in self.checks)
        return {"num_checks": n, "checks_with_moves": sum(1 for c in self.checks if c.made),
                "planned": self.num_planned, "made": self.num_made,
                "effective": self.num_effective,
                "mean_imbalance": round(sum(c.imbalance for c in self.checks) / n, 3) if n
                else 0.0,
                "mean_context_per_response": round(ctx / running, 1) if running else 0.0}


def compare(live: BalanceTrace, sim: BalanceTrace) -> dict[str, Any]:
    """Side by side summaries of a live step's trace and the simulator's, with the ratio of
    effective moves (live / sim; None when the simulator made none)."""
    a, b = live.summary(), sim.summary()
    return {"live": a, "sim": b,
            "effective_ratio": round(a["effective"] / b["effective"], 3) if b["effective"]
            else None}
