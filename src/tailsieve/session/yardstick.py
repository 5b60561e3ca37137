"""The balance gate's yardstick for an agentic step, shared by the simulator and every live
consumer: the step's own work as time, the same for steps with and without moves, so that
its error cancels when the gate compares them (``control.balance_gate``). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.workload.turns import Trajectory

__all__ = ["yardstick_s"]


def yardstick_s(trajectories: Sequence[Trajectory], configs: Sequence[ReplicaConfig]) -> float:
    """A step's own work as time: the longer of its longest trajectory alone (decode at batch
    1 plus its tools) and its decode tokens spread over the replicas at their peak rate."""
    model = configs[0].throughput
    solo = model.tau(1)
    crit = max(t.output_tokens * solo + t.tool_s for t in trajectories)
    rate = sum(c.throughput.peak_aggregate_tokens_per_s() for c in configs)
    return max(crit, sum(t.output_tokens for t in trajectories) / rate)
