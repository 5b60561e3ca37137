"""Offline oracles with known lengths: the exact 2-replica optimum, the top-k sweep and a
makespan lower bound (docs/design.md, "Offline oracle"). Pure functions over numpy arrays."""

from tailsieve.oracle.bounds import makespan_lower_bound
from tailsieve.oracle.pareto_dp import (
    OptimalSplit,
    OracleTimeoutError,
    solve_two_replicas,
    validate_lengths,
)
from tailsieve.oracle.topk import TopKSweep, topk_sweep

__all__ = [
    "OptimalSplit",
    "OracleTimeoutError",
    "TopKSweep",
    "makespan_lower_bound",
    "solve_two_replicas",
    "topk_sweep",
    "validate_lengths",
]
