"""Uniform routing as a controller: m = 0, q = 0, nothing extra launched."""

from __future__ import annotations

from typing import Any

from tailsieve.control.base import Controller, ControlTargets
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan


class UniformController(Controller):
    """Groups kept whole and spread round-robin over all replicas; no cutoff, no candidates."""

    name = "uniform"

    def targets(self) -> ControlTargets:
        return ControlTargets(q=0, m=0, num_extra=0)

    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None
