"""Uniform routing as a controller: m = 0, q = 0, nothing extra launched."""

from __future__ import annotations

from typing import Any

from tailsieve.core.controller import Controller, ControlTargets
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan


class UniformController(Controller):
    """No tail pool, no cutoff, no candidates: every group launched fresh over all replicas.

    ``spread=False`` (``uniform``, the paper's baseline): groups kept whole, dealt round-robin.
    ``spread=True`` (``uniform-requests``): single responses dealt round-robin, response ``j`` of
    the step (groups in order) on replica ``j mod R``, the placement of the simulator's
    ``uniform-requests`` policy (``tailsieve.policy.uniform``) and of a per-request
    load balancer.
    """

    def __init__(self, spread: bool = False) -> None:
        self.spread = spread
        self.name = "uniform-requests" if spread else "uniform"

    def targets(self) -> ControlTargets:
        return ControlTargets(q=0, m=0, num_extra=0, spread=self.spread)

    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
