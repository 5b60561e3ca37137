"""Policies by name. ``default_registry()`` returns a fresh registry with the baselines; add
more with ``PolicyRegistry.register`` (e.g. the simulator's TailSieve policies). No
module-level mutable state: every registry is an explicit object."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from tailsieve.errors import ConfigError
from tailsieve.policy.base import RoutingPolicy
from tailsieve.policy.colocate_tokens import ColocateTokensPolicy
from tailsieve.policy.seer_oracle import SeerOraclePolicy
from tailsieve.policy.streamrl_oracle import StreamRLOraclePolicy
from tailsieve.policy.uniform import UniformOraclePolicy, UniformPolicy, UniformRequestsPolicy

PolicyFactory = Callable[[], RoutingPolicy]


class PolicyName(str, Enum):
    """Names of the baseline policies (paper appendix A.2)."""

    UNIFORM = "uniform"
    UNIFORM_ORACLE = "uniform-oracle"
    STREAMRL_ORACLE = "streamrl-oracle"
    SEER_ORACLE = "seer-oracle"
    UNIFORM_REQUESTS = "uniform-requests"  # not in the paper: per-request round-robin
    COLOCATE_TOKENS = "colocate-tokens"  # not in the paper: llm-d's burst mode, by tokens


class PolicyRegistry:
    """Name -> factory of a fresh policy instance."""

    def __init__(self) -> None:
        self._factories: dict[str, PolicyFactory] = {}

    def register(
        self, name: str | PolicyName, factory: PolicyFactory, replace: bool = False
    ) -> None:
        """Add a policy; re-registering a name needs ``replace=True``."""
        key = _key(name)
        if key in self._factories and not replace:
            raise ConfigError(f"policy {key!r} is already registered")
        self._factories[key] = factory

    def get(self, name: str | PolicyName) -> RoutingPolicy:
        """A new instance of the named policy."""
        key = _key(name)
        factory = self._factories.get(key)
        if factory is None:
            raise ConfigError(f"unknown policy {key!r}; choose one of {', '.join(self.names())}")
        return factory()

    def names(self) -> list[str]:
        return list(self._factories)


def _key(name: str | PolicyName) -> str:
    return name.value if isinstance(name, PolicyName) else str(name)


def default_registry() -> PolicyRegistry:
    """A registry holding the four paper baselines, per-request round-robin and llm-d's
    token-balanced group co-location."""
    reg = PolicyRegistry()
    reg.register(PolicyName.UNIFORM, UniformPolicy)
    reg.register(PolicyName.UNIFORM_ORACLE, UniformOraclePolicy)
    reg.register(PolicyName.STREAMRL_ORACLE, StreamRLOraclePolicy)
    reg.register(PolicyName.SEER_ORACLE, SeerOraclePolicy)
    reg.register(PolicyName.UNIFORM_REQUESTS, UniformRequestsPolicy)
    reg.register(PolicyName.COLOCATE_TOKENS, ColocateTokensPolicy)
    return reg


def register_policy(
    registry: PolicyRegistry, name: str | PolicyName, factory: PolicyFactory, replace: bool = False
) -> None:
    """Add ``factory`` under ``name`` to ``registry`` (see ``PolicyRegistry.register``)."""
    registry.register(name, factory, replace=replace)


def get_policy(name: str | PolicyName, registry: PolicyRegistry | None = None) -> RoutingPolicy:
    """A new instance of the named policy from ``registry`` (default: the baselines)."""
    return (registry or default_registry()).get(name)
