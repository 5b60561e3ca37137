"""One replica's state as a session router sees it at a decision."""

from __future__ import annotations

from dataclasses import dataclass

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig

__all__ = ["ReplicaView"]


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica's state as a router sees it at a decision (counts, contexts, its cost
    model); built by the caller from its own bookkeeping (``SessionBook.views``) or, in the
    simulator, from the engines."""

    replica: int
    config: ReplicaConfig  # its cost model (tau(b), context rate k, prefill/recompute)
    num_running: int  # requests decoding now
    context_tokens: float  # context held by them
    num_waiting: int = 0  # requests queued, not yet admitted
    num_tool_waits: int = 0  # sessions whose last turn ran here, now in a tool call
    tool_wait_context_tokens: float = 0.0  # the context those sessions hold
    prefill_backlog_tokens: float = 0.0  # tokens admitted or queued but not yet prefilled
    healthy: bool = True

    def __post_init__(self) -> None:
        if self.replica < 0:
            raise ConfigError(f"replica must be >= 0, got {self.replica}")
        for name in ("num_running", "num_waiting", "num_tool_waits"):
            if getattr(self, name) < 0:
                raise ConfigError(f"replica {self.replica}: {name} must be >= 0, "
                                  f"got {getattr(self, name)}")
        for name in ("context_tokens", "tool_wait_context_tokens", "prefill_backlog_tokens"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"replica {self.replica}: {name} must be >= 0, "
                                  f"got {getattr(self, name)}")

    @property
    def num_in_flight(self) -> int:
        """Requests running or queued: what count routers (verl, SGLang) read as load."""
        return self.num_running + self.num_waiting
