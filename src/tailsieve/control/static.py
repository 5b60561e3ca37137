"""A controller that holds (q, m) where it is told: TailSieve's protocol without feedback."""

from __future__ import annotations

from typing import Any

from tailsieve.core.controller import Controller, ControlTargets
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.errors import ConfigError


class StaticController(Controller):
    """Every step asks for ``q`` tail groups on ``m`` tail replicas and ``c = q`` extras.

    For a split and a tail size found offline (a sweep such as the protocol-ceiling benchmark)
    and for ablations: it isolates what the protocol gains from what the controller adds.
    ``m = 0`` is uniform routing. Nothing changes between steps; the saved state is the held
    (q, m), checked on restore.
    """

    name = "tailsieve-static"

    def __init__(
        self, q: int, m: int, num_groups: int, num_replicas: int,
        num_extra: int | None = None, spread: bool = False,
    ) -> None:
        if not 0 <= m <= num_replicas - 1:
            raise ConfigError(f"m must be in [0, R-1] = [0, {num_replicas - 1}], got {m}")
        if m > 0 and not 1 <= q <= num_groups - 1:
            raise ConfigError(f"q must be in [1, N-1] = [1, {num_groups - 1}], got {q}")
        self.q = q if m > 0 else 0
        self.m = m
        self.num_extra = self.q if num_extra is None else num_extra
        if not 0 <= self.num_extra <= num_groups:
            raise ConfigError(f"num_extra must be in [0, N] = [0, {num_groups}], got {num_extra}")
        self.spread = spread

    def targets(self) -> ControlTargets:
        return ControlTargets(q=self.q, m=self.m, num_extra=self.num_extra, spread=self.spread)

    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "q": self.q, "m": self.m}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state.get("q"), state.get("m")) != (self.q, self.m):
            raise ConfigError(
                f"saved static targets (q={state.get('q')}, m={state.get('m')}) differ from "
                f"this controller's (q={self.q}, m={self.m})"
            )
