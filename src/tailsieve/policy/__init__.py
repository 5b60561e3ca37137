"""Routing policies: which replica runs each response (baselines of paper appendix A.2)."""

from tailsieve.policy.base import RoutingPolicy
from tailsieve.policy.registry import (
    PolicyName,
    PolicyRegistry,
    default_registry,
    get_policy,
    register_policy,
)
from tailsieve.policy.routing import Routing
from tailsieve.policy.seer_oracle import SeerOraclePolicy
from tailsieve.policy.streamrl_oracle import StreamRLOraclePolicy
from tailsieve.policy.uniform import UniformOraclePolicy, UniformPolicy

__all__ = [
    "PolicyName",
    "PolicyRegistry",
    "Routing",
    "RoutingPolicy",
    "SeerOraclePolicy",
    "StreamRLOraclePolicy",
    "UniformOraclePolicy",
    "UniformPolicy",
    "default_registry",
    "get_policy",
    "register_policy",
]
