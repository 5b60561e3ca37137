"""Inner loop: balance tail and bulk completion times by moving q (docs/design.md, "Controller")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tailsieve.control.config import ControllerConfig


@dataclass(slots=True)
class InnerLoopState:
    """Mutable state of the inner loop (saved with the checkpoint)."""

    velocity: float = 0.0  # damped momentum of (q* - q), groups
    last_q_star: float = 0.0  # balanced target from the last observation
    settled: bool = False  # the last decision found q balanced


@dataclass(frozen=True, slots=True)
class InnerDecision:
    """Outcome of one inner-loop observation."""

    q_star: float  # balanced q from observed rates
    new_q: int  # q for the coming steps (== q when unchanged)
    predicted_gain: float  # relative makespan gain the rate model predicts for new_q


class InnerLoop:
    """Moves q toward a balanced target with damped momentum, a bounded step and a gain threshold.

    The target is either the paper's rate rule ``q* = N r_tail / (r_tail + r_bulk)`` (``decide``)
    or a model-predicted balance point supplied by the controller (``move_toward``).
    """

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.state = InnerLoopState()

    def decide(self, q: int, tail_s: float, bulk_s: float) -> InnerDecision:
        """Paper rule: ``q*`` from the observed group rates of a clean step run at ``q``."""
        n = self.config.num_groups
        if q <= 0 or tail_s <= 0 or bulk_s <= 0 or q >= n:
            return InnerDecision(float(q), q, 0.0)
        r_tail = q / tail_s
        r_bulk = (n - q) / bulk_s
        q_star = n * r_tail / (r_tail + r_bulk)

        def makespan(x: int) -> float:
            return max(x / r_tail, (n - x) / r_bulk)

        return self.move_toward(q, q_star, makespan)

    def move_toward(self, q: int, q_star: float, makespan: Callable[[int], float]) -> InnerDecision:
        """Damped-momentum step from ``q`` toward ``q_star``, bounded, applied only when the
        predicted relative gain ``(makespan(q) - makespan(new)) / makespan(q)`` clears the
        threshold."""
        cfg, st = self.config, self.state
        st.last_q_star = q_star
        st.velocity = cfg.momentum * st.velocity + (1.0 - cfg.momentum) * (q_star - q)
        step = max(-cfg.q_step_cap, min(cfg.q_step_cap, round(st.velocity)))
        if step == 0 and abs(q_star - q) >= 1.0:
            step = 1 if q_star > q else -1
        new_q = max(cfg.q_min, min(cfg.q_cap, q + step))
        now = makespan(q)
        gain = (now - makespan(new_q)) / now if now > 0 else 0.0
        st.settled = abs(q_star - q) <= max(1.0, cfg.settle_tolerance * q)
        if new_q == q or gain <= cfg.q_gain_threshold:
            if st.settled:
                st.velocity = 0.0
            return InnerDecision(q_star, q, gain)
        return InnerDecision(q_star, new_q, gain)

    def reset(self) -> None:
        self.state = InnerLoopState()

    def state_dict(self) -> dict[str, Any]:
        return asdict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = InnerLoopState(**state)
