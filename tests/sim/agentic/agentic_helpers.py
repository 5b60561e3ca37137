"""One simulated agentic step, for the tests that need no more than its stats."""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.router_base import SessionRouter
from tailsieve.sim.agentic.stats import StepStats
from tailsieve.sim.agentic.step import StepOptions, TurnStepSim
from tailsieve.workload.turns import Trajectory


def simulate_step(trajectories: Sequence[Trajectory], configs: Sequence[ReplicaConfig],
                  router: SessionRouter, options: StepOptions | None = None) -> StepStats:
    """Run one step of ``trajectories`` on replicas ``configs`` under ``router``."""
    return TurnStepSim(trajectories, configs, router, options or StepOptions()).run()
