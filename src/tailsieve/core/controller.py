"""The controller interface the step protocol calls (``core.protocol``); the controllers
themselves live in ``tailsieve.control``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.diagnostics import PredictedPoolTimes
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.model.throughput import ThroughputModel


@dataclass(frozen=True, slots=True)
class ControlTargets:
    """What the controller wants for the next step."""

    q: int  # tail groups (capped by the carried candidates when planned)
    m: int  # tail replicas (0 = uniform routing)
    num_extra: int  # c: extra fresh bulk groups to launch, producing next step's candidates
    spread: bool = False  # deal each group's responses one by one over its pool's replicas
    balance: BalanceSettings | None = None  # move running responses while the step runs


class Controller(ABC):
    """Decides (q, m, c) between steps. Pure: no I/O, no clock.

    ``targets`` is called by ``RolloutProtocol.plan_step`` before each step;
    ``observe`` is called by ``RolloutProtocol.update_from_outcome`` after each step.
    """

    name: str = "controller"

    @abstractmethod
    def targets(self) -> ControlTargets:
        """Targets for the next step."""

    @abstractmethod
    def observe(self, plan: StepPlan, outcome: StepOutcome) -> None:
        """Consume a finished step and update the targets."""

    def resize(self, num_replicas: int) -> None:
        """The number of serving replicas changed (a replica failed or came back) before the
        next ``targets`` call. Default: nothing to re-plan (the protocol caps m at R - 1)."""
        return None

    def set_throughput(self, model: ThroughputModel) -> None:
        """Predict with ``model`` from the next decision on (the live ``auto`` profile refits
        it between steps). Default: the controller uses no throughput model."""
        return None

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; ``load_state_dict`` restores it exactly."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore state written by ``state_dict``."""

    def predict_pool_times(self, q: int, m: int) -> PredictedPoolTimes | None:
        """The controller's own prediction of the next step's (T_tail, T_bulk_cut) at (q, m),
        from what it has observed so far; None when it has no model (the default). Used for
        diagnostics only: it must not change the controller's state."""
        return None
